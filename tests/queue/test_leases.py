"""Lease queue semantics with real processes: exclusive claims, heartbeats, reaping, fencing,
concurrent reapers, errored-attempt limit and quarantine, recovery by `rm -rf queue.txt.leases`."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from harness.config.create import create_run
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.records import append_record
from harness.queue import reaper
from harness.queue.leases import LeaseQueue
from harness.queue.listing import scan
from harness.queue.units import Unit, split
from harness.runqueue import open_queue, queue_states, run_units
from harness.worker.unit_records import missing_seeds

CTX = mp.get_context("fork")


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunDir:
    for name, value in {
        "USE_EVAL_SEEDS": "0", "EVAL_TEST_NUM": "4", "UNIT_SEEDS": "0", "LEASE_TTL": "60",
        "HEARTBEAT_S": "0.2", "LEASE_SKEW_S": "0", "CRASH_LIMIT": "3", "BENCH_CONFIG": "clean",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    return _created(tmp_path / "run", "".join(f"scene{i % 3} task{i}\n" for i in range(30)))


def _created(root: Path, queue_text: str) -> RunDir:
    """A run created over `queue_text` under the environment's knobs: units are planned from run.yaml."""
    run = RunDir(root)
    run.root.mkdir()
    run.queue.write_text(queue_text)
    create_run(run.root, run.queue)
    return run


def _queue(run: RunDir, worker: str = "w") -> LeaseQueue:
    return open_queue(run, worker, Settings.from_env(os.environ))


def _claim_all(run: RunDir, worker: str, out: Path) -> None:
    queue = _queue(run, worker)
    with open(out, "w") as handle:
        while (lease := queue.claim()) is not None:
            handle.write(lease.unit.key + "\n")
            time.sleep(0.002)
            assert queue.mark(lease, done=True)


def test_claims_are_exclusive_across_processes(run: RunDir, tmp_path: Path) -> None:
    procs = [CTX.Process(target=_claim_all, args=(run, f"w{i}", tmp_path / f"w{i}.txt")) for i in range(6)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    claimed = [key for i in range(6) for key in (tmp_path / f"w{i}.txt").read_text().split()]
    keys = {unit.key for unit in run_units(run)}
    assert sorted(claimed) == sorted(keys)  # each unit claimed once, by exactly one process
    listing = scan(run.leases)
    assert listing.done == keys and not listing.leased
    assert not [n for n in listing.names if n.startswith(".")]
    for key in keys:  # a finished unit's dir stays: a stale listing's mkdir cannot claim it again
        with pytest.raises(FileExistsError):
            os.mkdir(run.leases / key)


def _hold(run: RunDir, seconds: float, ready: Path, result: Path) -> None:
    """Claim one unit, signal readiness, hold it up to `seconds` (or until lost), then finish it."""
    queue = _queue(run, "holder")
    lease = queue.claim()
    assert lease is not None
    ready.write_text(lease.unit.key)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not lease.lost.is_set():
        time.sleep(0.05)
    result.write_text(json.dumps({"lost": lease.lost.is_set(), "marked": queue.mark(lease, done=True)}))


def _start_holder(run: RunDir, tmp_path: Path, seconds: float) -> tuple[mp.Process, str]:
    ready, result = tmp_path / "ready", tmp_path / "result"
    proc = CTX.Process(target=_hold, args=(run, seconds, ready, result))
    proc.start()
    for _ in range(200):
        if ready.exists():
            return proc, ready.read_text()
        time.sleep(0.05)
    raise AssertionError("holder did not claim")


def test_heartbeat_keeps_a_slow_owner_alive(
    run: RunDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEASE_TTL", "1")
    proc, key = _start_holder(run, tmp_path, seconds=2.5)
    other = _queue(run, "other")
    other.refresh()
    time.sleep(1.8)  # longer than LEASE_TTL: only the heartbeat keeps the lease
    assert other.reap_pass() == []
    proc.join(10)
    assert json.loads((tmp_path / "result").read_text()) == {"lost": False, "marked": True}
    assert key in scan(run.leases).done


def test_dead_owner_on_this_host_is_reaped_at_once(run: RunDir, tmp_path: Path) -> None:
    proc, key = _start_holder(run, tmp_path, seconds=60)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    other = _queue(run, "other")
    other.refresh()
    assert other.reap_pass() == [key]  # LEASE_TTL is 60 s: the dead pid decided it
    assert key not in scan(run.leases).leased


def test_stopped_owner_is_reaped_after_ttl_and_fenced(
    run: RunDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEASE_TTL", "1")
    proc, key = _start_holder(run, tmp_path, seconds=30)
    os.kill(proc.pid, signal.SIGSTOP)  # alive but silent: only the heartbeat age can tell
    try:
        other = _queue(run, "other")
        other.refresh()
        assert other.reap_pass() == []
        time.sleep(1.5)
        assert other.reap_pass() == [key]
        [line] = other.reaped  # the reaper's side of it, for its log
        assert line.startswith(f"reaped unit={key} from worker=") and f"pid={proc.pid}" in line, line
        assert "no heartbeat for" in line and "LEASE_TTL=1" in line, line
        mine = other.claim()
        assert mine is not None and mine.unit.key == key
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    proc.join(10)
    # The slow owner learnt at its next heartbeat that it lost the lease, and did not mark done.
    assert json.loads((tmp_path / "result").read_text()) == {"lost": True, "marked": False}
    assert key not in scan(run.leases).done
    assert other.mark(mine, done=True) and key in scan(run.leases).done


def _fake_stale_lease(root: Path, key: str) -> None:
    """A lease of an owner on another host whose last heartbeat is 10 minutes old."""
    (root / key).mkdir(parents=True)
    owner = {"host": "elsewhere", "pid": 1, "worker": "ghost", "slurm_job_id": "", "generation": "g0"}
    beat = root / key / "owner.g0.7"
    beat.write_text(json.dumps(owner))
    os.utime(beat, (time.time() - 600, time.time() - 600))


def _race_reap(root: Path, key: str, barrier: mp.Barrier, out: mp.Queue) -> None:
    clock = reaper.ServerClock(root)
    view = reaper.inspect(root, key, clock.now())
    judge = reaper.Judge(ttl=60, skew=0, job_alive=lambda job: None)
    barrier.wait()
    won = view is not None and judge.reason(view) is not None and reaper.reap(root, view)
    out.put(won)


def test_concurrent_reapers_have_exactly_one_winner(tmp_path: Path) -> None:
    root = tmp_path / "leases"
    for round_ in range(15):
        _fake_stale_lease(root, f"unit{round_}")
        barrier, out = CTX.Barrier(8), CTX.Queue()
        procs = [CTX.Process(target=_race_reap, args=(root, f"unit{round_}", barrier, out)) for _ in range(8)]
        for proc in procs:
            proc.start()
        wins = [out.get(timeout=30) for _ in procs]
        for proc in procs:
            proc.join()
        assert wins.count(True) == 1, wins
        assert not (root / f"unit{round_}").exists()
    assert os.listdir(root) == []  # no tombstone or probe left


def test_dead_slurm_job_is_reaped(tmp_path: Path) -> None:
    root = tmp_path / "leases"
    _fake_stale_lease(root, "u")
    beat = root / "u" / "owner.g0.7"
    beat.write_text(json.dumps({**json.loads(beat.read_text()), "slurm_job_id": "4242"}))  # fresh beat
    view = reaper.inspect(root, "u", time.time())
    assert view is not None
    assert reaper.Judge(60, 0, job_alive=lambda job: True).reason(view) is None
    assert "4242" in str(reaper.Judge(60, 0, job_alive=lambda job: job != "4242").reason(view))


def test_crash_limit_quarantines_with_last_error(run: RunDir, tmp_path: Path) -> None:
    run = _created(tmp_path / "crashy-run", "s crashy\ns fine\n")
    for attempt in (1, 2, 3):  # a different worker each time: the count is shared
        queue = _queue(run, f"w{attempt}")
        while (lease := queue.claim()).unit.task != "crashy":
            queue.mark(lease, done=False)
        assert queue.release_errored(lease, f"boom {attempt}") == (attempt == 3)
    states = {s.unit.task: s for s in queue_states(run, Settings.from_env(os.environ))}
    assert states["crashy"].state == "quarantined"
    assert states["crashy"].last_error == "boom 3" and states["crashy"].errored_attempts == 3
    assert states["fine"].state == "pending"
    queue = _queue(run, "last")
    lease = queue.claim()
    assert lease.unit.task == "fine" and queue.mark(lease, done=True)
    assert queue.claim() is None  # a quarantined unit is never claimed again


def test_snapshot_and_rm_rf_recovery(run: RunDir, tmp_path: Path) -> None:
    proc, key = _start_holder(run, tmp_path, seconds=30)
    queue = _queue(run)
    done = queue.claim()
    assert done is not None and queue.mark(done, done=True)
    states = {s.key: s for s in queue_states(run, Settings.from_env(os.environ))}
    assert states[done.unit.key].state == "done"
    leased = states[key]
    assert leased.state == "leased" and leased.owner["worker"] == "holder" and leased.stale is None
    assert leased.heartbeat_age is not None and leased.heartbeat_age < 5
    assert sum(s.state == "pending" for s in states.values()) == len(states) - 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert "gone" in str({s.key: s for s in queue_states(run, Settings.from_env(os.environ))}[key].stale)
    shutil.rmtree(run.leases)  # the documented recovery from any state
    assert {s.state for s in queue_states(run, Settings.from_env(os.environ))} == {"pending"}
    assert _queue(run).claim() is not None


def test_units_slices_and_missing_seeds(tmp_path: Path) -> None:
    units = split("s", "t", "s_clean", [5, 6, 7, 8, 9], 2)
    assert [u.seeds for u in units] == [(5, 6), (7, 8), (9,)]
    assert [u.key for u in units] == ["s__t__0-2", "s__t__2-4", "s__t__4-5"]
    assert Unit("a b", "t/u", "c", 0, 1, (1,)).key == "a b__t%2Fu__0-1"  # names percent-encoded, reversibly
    unit = split("s", "t", "s_clean", [1, 2, 3, 4], 0)[0]
    base = {"task": "t", "scene": "s", "task_config": "s_clean", "success": False, "hard_success": False}
    base |= {k: None for k in ("steps", "wall_s", "sim_s", "model_s", "policy", "ckpt", "host", "worker")}
    base |= {"sim_version": "", "contract": "", "video": None}
    path = tmp_path / "_metrics.a.jsonl"
    append_record(path, {**base, "seed": 1, "error": None, "finished_at": "1"})  # a policy failure: final
    append_record(path, {**base, "seed": 2, "error": "sim crashed", "finished_at": "1"})  # errored: retry
    append_record(path, {**base, "seed": 3, "error": "sim crashed", "finished_at": "1"})
    append_record(path, {**base, "seed": 3, "error": None, "success": True, "finished_at": "2"})
    assert missing_seeds(tmp_path, unit) == [2, 4]
