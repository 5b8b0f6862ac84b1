"""The orchestrators: sweep over configs, several models in parallel, fill-ins.

Each is a command-line module (`sweep`, `parallel`, `fillin`) behind a thin shell script in
`orchestrators/`. They create or check run dirs through `harness.manifest`, start node pools through
`harness.orchestrate.launch` (LAUNCHER=srun or local: one code path), and decide what is left from
the records alone, so re-running the same command resumes without redoing finished episodes.
"""
