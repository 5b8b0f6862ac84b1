"""What a run is, before anything runs: knobs and settings, paths, seed banks, fingerprints, the run
manifest and its contract.

Every other stage reads its settings from here. Nothing here starts a process, opens a connection
or touches a simulator, and nothing here imports the queue or the wire (tests/test_layers.py): what
needs them is handed in (an external policy server's probe, `harness.episode.serverdial`; the
code's git version, `harness.launch.newrun`), so the run's contract can be built, checked and
planned on any machine. Its I/O is files only: the run's (run.yaml, the queue file, decision
markers), seed banks, and what it fingerprints (checkpoints, the code).
"""
