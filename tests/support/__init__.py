"""Shared test helpers: pool and wire kits, result fixtures, the local Slurm cluster, test doubles."""
