"""Suite-wide pytest plugins: `support.slurm_support` provides the session's local Slurm cluster fixture."""

pytest_plugins = ["support.slurm_support"]
