"""Regressions of the lease queue's promises (issue 11, items 1, 2, 3, 7, 9): each test failed on the
queue as it was, where a claim was a mkdir and then a separate owner-file write, quarantine was not
enforced by the claim, Slurm's first answer about a job was cached for ever, the reaper decided from
`exists()`, and owner identity ignored PID namespaces."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness.queue import leases, owner, reaper
from harness.queue.leases import LeaseQueue, QueueSettings
from harness.queue.listing import scan
from harness.queue.slurmjob import job_alive
from harness.queue.units import Unit

UNIT = Unit("s", "t", "s_clean", 0, 1, (0,))
FAST = QueueSettings(ttl_s=0.5, heartbeat_s=0.1, skew_s=0.0, crash_limit=3)


def queue(root: Path, worker: str, settings: QueueSettings = FAST) -> LeaseQueue:
    return LeaseQueue(root, [UNIT], worker, settings)


def test_a_claimant_stalled_mid_claim_never_shares_the_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 1: A stalls (NFS hiccup, SIGSTOP) in the middle of its claim for longer than the TTL."""
    stalled = threading.Event()
    real_write = leases.write_once

    def slow_write(path: Path, text: str) -> bool:
        if threading.current_thread().name == "A" and path.name.startswith("owner."):
            stalled.set()
            time.sleep(2.0)  # four TTLs
        return real_write(path, text)

    monkeypatch.setattr(leases, "write_once", slow_write)
    got: dict[str, bool] = {}
    stop = threading.Event()

    def claimant_a() -> None:
        lease = queue(tmp_path, "A").claim(stop)
        got["A"] = lease is not None and lease.finish(done=True)

    a = threading.Thread(target=claimant_a, name="A")
    a.start()
    assert stalled.wait(10)
    time.sleep(FAST.ttl_s * 2)  # A's claim looks dead by now, whatever it left on disk
    b_queue = queue(tmp_path, "B")
    b = b_queue.claim(stop)
    got["B"] = b is not None and b_queue.mark(b, done=True)
    stop.set()
    a.join(20)
    assert got["B"] and not got["A"]  # exactly one owner ever marked the unit done
    assert [n for n in os.listdir(tmp_path / UNIT.key) if n.startswith("done.")] == [f"done.{b.generation}"]


def test_a_quarantined_unit_cannot_be_claimed_from_a_stale_listing(tmp_path: Path) -> None:
    """Item 2: A listed the unit while it had 2 errored attempts; B's third errored attempt quarantined it."""
    a, b = queue(tmp_path, "A"), queue(tmp_path, "B")
    for _ in range(2):
        lease = b.claim()
        assert lease is not None and not b.release_errored(lease, "boom")
    assert a.refresh() and a._candidates == [UNIT.key]  # A's listing: pending, 2 errored attempts
    lease = b.claim()
    assert lease is not None and b.release_errored(lease, "boom")  # the 3rd: quarantined
    assert a.claim() is None  # A's stale candidate is refused by the claim itself
    crashes = sorted(n for n in scan(tmp_path).names if ".crash." in n)
    assert crashes == [f"{UNIT.key}.crash.{n}" for n in (1, 2, 3)]  # no 4th attempt


def test_a_slurm_job_that_ends_later_is_seen_ended() -> None:
    """Item 3: every job is alive when first seen; the judge must ask again."""
    answers = iter([True, False])
    judge = reaper.Judge(ttl=3600, skew=0, job_alive=lambda job: next(answers), recheck_s=0.0)
    view = reaper.LeaseView(UNIT.key, {"slurm_job_id": "42", "host": "elsewhere"}, "owner.g.1", 0, 1.0, "g")
    assert judge.reason(view) is None
    assert judge.reason(view) == "owner's Slurm job 42 has ended"


def test_slurm_is_asked_again_only_after_the_recheck_interval() -> None:
    calls: list[str] = []
    judge = reaper.Judge(ttl=3600, skew=0, job_alive=lambda job: calls.append(job) or True, recheck_s=3600)
    view = reaper.LeaseView(UNIT.key, {"slurm_job_id": "7", "host": "elsewhere"}, "owner.g.1", 0, 1.0, "g")
    for _ in range(5):
        judge.reason(view)
    assert calls == ["7"]


@pytest.mark.slurm
def test_the_real_job_alive_sees_a_job_start_and_end(slurm: dict[str, str]) -> None:
    env = {**os.environ, **slurm}
    argv = ["sbatch", "--parsable", "--output=/dev/null", "--wrap", "sleep 300"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    saved = dict(os.environ)
    os.environ.update(slurm)
    try:
        assert job_alive(job) is True
        subprocess.run(["scancel", job], env=env, check=True)
        deadline = time.monotonic() + 60
        while job_alive(job) is not False:
            assert time.monotonic() < deadline, f"job {job} still alive after scancel"
            time.sleep(0.5)
        assert job_alive("999999999") is False or job_alive("999999999") is None
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_a_finished_unit_is_never_reaped_even_when_its_done_mark_is_invisible(tmp_path: Path) -> None:
    """Item 7: on NFS the listing's `<key>.done` can be invisible for ~45 s (a cached negative lookup)."""
    a = queue(tmp_path, "A")
    lease = a.claim()
    assert lease is not None and a.mark(lease, done=True)
    (tmp_path / f"{UNIT.key}.done").unlink()  # what a stale negative lookup shows another node
    time.sleep(FAST.ttl_s * 2)
    b = queue(tmp_path, "B")
    assert b.claim() is None  # not reaped, not claimed again: the lease dir says done
    assert (tmp_path / f"{UNIT.key}.done").exists()  # B wrote the listing's hint back


def test_a_dead_reapers_mark_is_reaped_in_turn(tmp_path: Path) -> None:
    a = queue(tmp_path, "A")
    lease = a.claim()
    assert lease is not None
    a.heartbeat.discard(lease)
    path = tmp_path / UNIT.key
    os.rename(lease.owner_file(), path / f"reaped.{lease.generation}.dead")  # a reaper died after the fence
    time.sleep(FAST.ttl_s * 2)
    b = queue(tmp_path, "B")
    again = b.claim()
    assert again is not None and again.generation != lease.generation
    assert not lease.finish(done=True)  # the first owner is fenced


def test_an_owner_in_another_pid_namespace_is_never_judged_dead_by_pid() -> None:
    """Item 9: containers that share hostname and boot id but not PID namespaces see other pids."""
    record = owner.owner_record("w", "g")
    assert record["pid_ns"] == owner.pid_namespace() != ""
    record.update(pid=2**22 + 12345, start_ticks=1)  # a pid that does not exist here
    assert owner.dead_on_this_host(record)
    record["pid_ns"] = "pid:[1]"
    assert not owner.dead_on_this_host(record)
