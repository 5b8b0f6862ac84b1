"""What a run is, before anything runs: knobs, paths, seed banks, fingerprints and the run manifest.

Every other stage reads its settings from here; nothing here starts a process or touches a simulator,
so the run's contract can be built, checked and planned on any machine.
"""
