"""The session's NFS guest (tests/nfs/uml.py) as the `nfs_guest` fixture.

Why one per session: the guest takes ~10 s to boot and every test here shares its server and two
client mounts (each test in a run dir of its own). Each session boots its own guest under
/tmp/nfs-test-<pid> and stops it at the end, so sessions running at once never share (or stop)
one another's. With NFS_TEST_STATE set, that guest is used: reused if it is up (say, started by
hand with `python tests/nfs/uml.py up`) and then left up. When the mounts cannot come up the
tests fail with the reason: an NFS test that skips would read as a proof that was never made.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nfs import uml


@pytest.fixture(scope="session")
def nfs_guest() -> Iterator[uml.Guest]:
    state = Path(os.environ.get("NFS_TEST_STATE") or f"{uml.DEFAULT_STATE}-{os.getpid()}")
    booted = not uml.healthy(state)
    try:
        guest = uml.up(state)
    except uml.NfsError as exc:
        pytest.fail(f"NFS guest: {exc}", pytrace=False)
    yield guest
    if booted:
        uml.down(state)
