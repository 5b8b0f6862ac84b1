"""Workers in other PID namespaces on this host (containers: Slurm with pyxis/enroot) share the queue
(issue 20, item 2). Their pids mean nothing here, so what they leave is judged by its age, never by a
pid lookup; and a worker whose staged claim was swept anyway stages a new one instead of dying."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from harness.queue import owner, reaper
from harness.queue.leases import LeaseQueue, QueueSettings
from harness.queue.listing import scan
from harness.queue.units import Unit

UNIT = Unit("s", "t", "s_clean", 0, 1, (0,))
SLOW = QueueSettings(ttl_s=60.0, heartbeat_s=0.1, skew_s=0.0, crash_limit=3)  # nothing ages by itself
NOT_HERE = 2**22 + 12345  # above any pid_max: no process here has it
ELSEWHERE_NS = "pid:[4026000001]"


def queue(root: Path, worker: str) -> LeaseQueue:
    return LeaseQueue(root, [UNIT], worker, SLOW)


def staged_claims(root: Path) -> list[str]:
    return [n for n in scan(root).names if n.startswith(reaper.CLAIM_PREFIX)]


def miss_in_another_namespace(root: Path, monkeypatch: pytest.MonkeyPatch) -> LeaseQueue:
    """Worker A, in another PID namespace (its pid does not exist here), tries the unit C holds and
    misses: its staged claim stays, waiting for its next try."""
    with monkeypatch.context() as patch:
        patch.setattr(os, "getpid", lambda: NOT_HERE)
        patch.setattr(owner, "pid_namespace", lambda: ELSEWHERE_NS)
        a = queue(root, "A")
        assert a._try(UNIT.key) is None
    assert len(staged_claims(root)) == 1
    return a


def test_a_live_claim_staged_in_another_pid_namespace_survives_a_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = queue(tmp_path, "C")
    held = c.claim()
    assert held is not None
    a = miss_in_another_namespace(tmp_path, monkeypatch)
    staged = staged_claims(tmp_path)
    assert queue(tmp_path, "B").refresh()  # B's listing sweeps what dead processes left
    assert staged_claims(tmp_path) == staged, "B judged A's live claim by a pid of another namespace"
    assert c.mark(held, done=False)
    lease = a._try(UNIT.key)  # A's next try: its staged claim is still there to rename
    assert lease is not None and lease.unit.key == UNIT.key


def test_an_old_claim_of_another_namespace_is_swept_by_age_and_its_owner_stages_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = queue(tmp_path, "C")
    held = c.claim()
    assert held is not None
    a = miss_in_another_namespace(tmp_path, monkeypatch)
    [name] = staged_claims(tmp_path)
    long_ago = time.time() - 10 * SLOW.ttl_s
    for path in (tmp_path / name).iterdir():
        os.utime(path, (long_ago, long_ago))  # A stalled (SIGSTOP) or died: no re-stamp for 10 TTLs
    assert queue(tmp_path, "B").refresh()
    assert staged_claims(tmp_path) == [], "a claim older than the TTL was left behind"
    assert c.mark(held, done=False)
    lease = a.claim()  # its staged claim is gone: the claim stages a new one, it does not raise
    assert lease is not None and lease.unit.key == UNIT.key


def test_clock_probes_of_another_namespace_go_by_age_only(tmp_path: Path) -> None:
    tag = "".join(c for c in ELSEWHERE_NS if c.isdigit())
    maker = f"{reaper.PROBE_PREFIX}{socket.gethostname()}.{tag}"
    fresh, old = (tmp_path / f"{maker}.{pid}" for pid in (NOT_HERE, 7))
    fresh.touch()
    old.touch()
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    reaper.sweep_tombs(tmp_path, os.listdir(tmp_path), max_age_s=60.0)
    assert fresh.exists(), "a probe of another namespace was judged by a pid that means nothing here"
    assert not old.exists()


def test_this_namespaces_dead_claims_still_go_at_once(tmp_path: Path) -> None:
    """The pid check stays where it is valid: this host, this PID namespace."""
    name = f"{reaper.CLAIM_PREFIX}{socket.gethostname()}.{owner.namespace_tag()}.{NOT_HERE}.abc"
    (tmp_path / name).mkdir()
    (tmp_path / name / "owner.abc.0").write_text("{}")
    reaper.sweep_tombs(tmp_path, os.listdir(tmp_path), max_age_s=60.0)
    assert os.listdir(tmp_path) == []


def test_a_claim_removed_by_another_nfs_client_after_its_open_is_not_swept_and_raises_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On NFS, a file another client removes between our open and our fstat fails the fstat with
    ESTALE: the sweep must take it as gone (the NFS chaos test saw a worker exit 1 on it)."""
    import errno

    name = f"{reaper.CLAIM_PREFIX}otherhost.{owner.namespace_tag()}.123.abc"
    (tmp_path / name).mkdir()
    (tmp_path / name / "owner.abc.0").write_text("{}")
    real_fstat = os.fstat

    def stale(fd: int) -> os.stat_result:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("owner.abc.0"):
            raise OSError(errno.ESTALE, "Stale file handle")
        return real_fstat(fd)

    monkeypatch.setattr(reaper.os, "fstat", stale)
    reaper.sweep_tombs(tmp_path, os.listdir(tmp_path), max_age_s=60.0)
    assert (tmp_path / name).exists()  # its age unknown: nothing swept


def test_a_probe_removed_by_another_nfs_client_gives_the_local_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    real_fstat = os.fstat

    def stale(fd: int) -> os.stat_result:
        if reaper.PROBE_PREFIX in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ESTALE, "Stale file handle")
        return real_fstat(fd)

    monkeypatch.setattr(reaper.os, "fstat", stale)
    before = time.time()
    assert before <= reaper.ServerClock(tmp_path).now() <= time.time()
