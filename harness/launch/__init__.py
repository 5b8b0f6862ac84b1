"""Starting pools and driving runs: the local pool, `srun` and submitit launchers, the orchestrators
(sweep, parallel models, fill-in), the in-process debug launcher, the lease CLI and seed-bank
precollection. The top stage: it may import every other one, and none imports it.

Each orchestrator is a command-line module (`sweep`, `parallel`, `fillin`) behind a thin shell script
in `orchestrators/`. They create or check run dirs through `harness.config`, start node pools through
`harness.launch.pools` (LAUNCHER=srun, submitit or local: one code path), and decide what is left from the
records alone, so re-running the same command resumes without redoing finished episodes.
"""
