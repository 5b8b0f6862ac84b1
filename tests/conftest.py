"""Suite-wide pytest plugins: `slurm_support` provides the session's local Slurm cluster fixture."""

pytest_plugins = ["slurm_support"]
