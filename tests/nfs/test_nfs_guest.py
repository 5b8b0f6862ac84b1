"""The NFS test harness itself (nfs.uml): commands run inside the guest with env, cwd, exit status and
a timeout; the mounts are two NFS clients of one export; and a guest whose mounts cannot come up is
an error that names the reason, with nothing left running or on disk."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

from nfs import uml

pytestmark = pytest.mark.nfs


def test_commands_run_inside_the_guest_on_two_nfs_clients(nfs_guest: uml.Guest) -> None:
    out = io.StringIO()
    script = 'echo "$GREETING from $(pwd)"; stat -f -c %T "$0" "$1"; exit 3'
    argv = ["sh", "-c", script, str(nfs_guest.mnt1), str(nfs_guest.mnt2)]
    env = {"GREETING": "hi", "PATH": "/bin:/usr/bin"}
    result = nfs_guest.run(argv, env=env, cwd="/tmp", timeout=60, out=out)
    assert result.rc == 3 and result.output == out.getvalue()
    assert result.output.split("\n")[:3] == ["hi from /tmp", "nfs", "nfs"]
    mounts = nfs_guest.run(["grep", " nfs", "/proc/mounts"], timeout=60, out=io.StringIO()).output
    assert "127.0.0.1:/ " in mounts and "127.0.0.2:/ " in mounts  # one server, two client addresses
    started = time.monotonic()
    assert nfs_guest.run(["sleep", "60"], timeout=1, out=io.StringIO()).rc == 124
    assert time.monotonic() - started < 20


def test_mounts_that_cannot_come_up_fail_with_the_reason() -> None:
    state = Path(f"/tmp/nfs-test-refused-{os.getpid()}")
    with pytest.raises(uml.NfsError, match=r"did not come up: mount -t nfs -o vers=9"):
        uml.up(state, mount_opts="vers=9", log=lambda _msg: None)  # no such NFS version
    assert not state.exists()  # stopped and removed: nothing left behind
    leftovers = [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(state).encode() in _read(p)]
    assert leftovers == []
    uml.down(state)  # idempotent


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
