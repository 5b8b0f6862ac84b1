"""Pytest plugin: the session's local Slurm cluster (tests/support/slurm_cluster.py) as the `slurm` fixture.

Why a plugin: every Slurm test shares one cluster per session. It is brought up if absent and reused
if healthy; it is stopped at the end only if this session started it. Tests skip, with the reason,
only when the Slurm/munge/mariadb programs are not installed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import slurm_cluster


@pytest.fixture(scope="session")
def slurm() -> Iterator[dict[str, str]]:
    """Client environment (with SLURM_CONF) for the running test cluster."""
    missing = slurm_cluster.missing_binaries()
    if missing:
        pytest.skip(f"Slurm test cluster needs {', '.join(missing)} (install with scripts/setup.sh)")
    state = Path(os.environ.get("SLURM_TEST_STATE", slurm_cluster.DEFAULT_STATE))
    started = not slurm_cluster.healthy(state)
    slurm_cluster.up(3, state)
    os.environ["SLURM_CONF"] = str(slurm_cluster.conf_path(state))
    yield slurm_cluster.client_env(state)
    if started:
        slurm_cluster.down(state)
