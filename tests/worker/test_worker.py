"""The worker loop end to end with real processes: model server (sleep policy), sim client (fast test
benchmark), lease queue. Resume and fill-in, stall handling and quarantine, SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import pytest

from harness.config.manifest_fillin import record_fillin
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.records import read_tree
from harness.queue import slurmjob
from harness.queue.listing import scan
from harness.queue.units import Unit
from harness.worker.loop import TEMP_PREFIX, Worker
from harness.worker.sim_process import SimOutcome
from support.codecopy import copy_code
from support.poolkit import REPO, check_finished, make_run, pool_env, start_worker, stop_group, wait_for


def _run_pool(env: dict[str, str], n: int, logs: Path, timeout: float = 120) -> None:
    procs = [start_worker(env, f"w{i}", logs / f"w{i}.log") for i in range(n)]
    try:
        for proc in procs:
            assert proc.wait(timeout) == 0
    finally:
        for proc in procs:
            stop_group(proc)


def test_pool_runs_the_queue_then_resumes_only_new_seeds(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [(f"scene{i % 2}", f"task{i}") for i in range(6)])
    env = pool_env(run)
    _run_pool(env, 2, tmp_path)
    check_finished(run, env, set())
    before = read_tree(run.results).records
    assert len(before) == 12
    record_fillin(run.root, eval_test_num=3, env=env)  # a fill-in: only the third seed of every cell runs
    env = pool_env(run, EVAL_TEST_NUM="3")
    _run_pool(env, 2, tmp_path)
    check_finished(run, env, set())
    after = read_tree(run.results).records
    assert len(after) == 18
    assert all(after[key]["finished_at"] == record["finished_at"] for key, record in before.items())
    _run_pool(env, 1, tmp_path)  # nothing left: a relaunch runs nothing
    assert read_tree(run.results).records == after


def test_sim_as_server_pool_runs_the_queue(tmp_path: Path) -> None:
    """SIM_AS_SERVER=1: every sim client listens and the worker's one model side dials each in turn."""
    run = make_run(tmp_path / "run", [("s", f"task{i}") for i in range(4)])
    env = pool_env(run, SIM_AS_SERVER="1")
    _run_pool(env, 2, tmp_path)
    check_finished(run, env, set())
    assert len(read_tree(run.results).records) == 8
    for i in range(2):
        assert "(dials each sim client)" in (tmp_path / f"w{i}.log").read_text()


def test_stalled_episode_is_killed_recorded_and_quarantined(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", "ok"), ("s", "hangs")])
    env = pool_env(run, FASTBENCH_HANG="hangs/1", STALL_TIMEOUT="1.5", CRASH_LIMIT="2")
    _run_pool(env, 1, tmp_path)
    check_finished(run, env, {"hangs"})
    record = read_tree(run.results).records[("hangs", "s_clean", 1)]
    assert record["error"] == "stalled"
    log = (tmp_path / "w0.log").read_text()
    assert "unit=s__hangs__0-2 seed=1 stalled: episode recorded as errored" in log
    assert "quarantined after 2 errored attempts" in log


def test_a_model_server_dead_after_start_is_seen_at_once_and_is_not_a_crash(tmp_path: Path) -> None:
    """The sim client would dial the dead server's stale ready file until STALL_TIMEOUT (issue 15.3)."""
    run = make_run(tmp_path / "run", [("s", "t0")])
    env = pool_env(run, STALL_TIMEOUT="120", SLEEP_POLICY_DIE_ONCE=str(tmp_path / "died"))
    started = time.monotonic()
    _run_pool(env, 1, tmp_path, timeout=60)
    assert time.monotonic() - started < 45  # not a STALL_TIMEOUT wait
    check_finished(run, env, set())
    log = (tmp_path / "w0.log").read_text()
    assert "model server died: episode recorded as errored" in log
    assert "model server died during the unit" in log and "errored attempt" not in log
    assert not list(run.leases.glob("*.crash.*"))  # not counted as an attempt of the unit


def test_a_model_server_death_mid_unit_is_not_an_attempt_of_the_unit(tmp_path: Path) -> None:
    """Issue 11, item 4: the server died at seed 1 and was restarted for seed 2; the unit's errored
    seed 1 was then counted as a crash of the unit, because the check came after the restart."""
    run = make_run(tmp_path / "run", [("s", "t0")])
    env = pool_env(run, EVAL_TEST_NUM="3", SLEEP_POLICY_DIE_AT_SEED=f"{tmp_path / 'died'}:1")
    _run_pool(env, 1, tmp_path, timeout=90)
    check_finished(run, env, set())  # seed 1 re-run on the next claim: every seed has a trial
    log = (tmp_path / "w0.log").read_text()
    # the server's cause either way: "died during the unit" once the worker sees its process gone,
    # "the sim client lost the model server" when the sim exits first (a loaded machine: the dying
    # server's socket closes before its process can be reaped)
    assert re.search(r"unit=s__t0__0-3 model server: .*: retrying later, not charged to the unit", log), log
    assert "errored attempt" not in log, log
    assert not list(run.leases.glob("*.crash.*"))


def test_episode_code_edited_after_the_workers_check_is_refused_by_the_sim_client(tmp_path: Path) -> None:
    """Issue 11, item 6: a node's code copy refreshed between the worker's start-up check and a unit
    used to run new episode code under the run's old contract hash."""
    code = copy_code(tmp_path / "code")
    (tmp_path / "queue.txt").write_text("s t0\n")
    run = RunDir(tmp_path / "runs" / "r")
    env = pool_env(run, create=False, EVAL_ROOT=str(code), PYTHONPATH=str(code), POLICY_ARGS="load_s=3",
                   POLICY=str(code / "tests" / "policies" / "sleep"))  # fmt: skip
    made = subprocess.run(
        [env.get("SIM_PY", sys.executable), str(code / "scripts" / "new_run.py"), str(run.root),
         "--queue", str(tmp_path / "queue.txt")], env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    log = tmp_path / "w0.log"
    with open(log, "ab") as out:
        argv = ["bash", str(code / "slurm" / "eval_worker.sh")]
        proc = subprocess.Popen(argv, env={**env, "WORKER_ID": "w0"}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:
        wait_for(lambda: "verified against" in log.read_text(), 60, "the worker's contract check")
        with open(code / "harness" / "episode" / "simclient.py", "a") as edit:
            edit.write("# an edit to the episode code mid-run\n")
        assert proc.wait(60) == 2, log.read_text()
    finally:
        stop_group(proc)
    text = log.read_text()
    assert "refusing to run" in text and "code.sha256" in text, text
    assert read_tree(run.results).records == {}  # not one episode under the wrong code


def test_a_frozen_worker_starts_no_episode_while_another_worker_takes_its_unit(tmp_path: Path) -> None:
    """SIGSTOP past LEASE_TTL: its sim client used to record on through the freeze (issue 15.8)."""
    run = make_run(tmp_path / "run", [("s", "t0")])
    env = pool_env(
        run,
        EVAL_TEST_NUM="8",
        LEASE_TTL="3",
        LEASE_SKEW_S="0.5",
        FASTBENCH_STEPS="10",
        FASTBENCH_STEP_MS="100",
    )  # fmt: skip  (1 s episodes)
    frozen = start_worker(env, "w0", tmp_path / "w0.log")
    other = None
    try:
        wait_for(lambda: "seed 0:" in (tmp_path / "w0.log").read_text(), 60, "w0's first episode")
        os.kill(frozen.pid, signal.SIGSTOP)
        stopped_at = time.time()
        other = start_worker(env, "w1", tmp_path / "w1.log")
        assert other.wait(60) == 0  # reaps w0's lease after LEASE_TTL and runs the unit
        resumed_at = time.time()
        os.kill(frozen.pid, signal.SIGCONT)
        assert frozen.wait(60) == 0
    finally:
        stop_group(frozen)
        if other is not None:
            stop_group(other)
    check_finished(run, env, set())
    files = run.results.rglob("_metrics*.jsonl")
    every = [json.loads(line) for path in files for line in path.read_text().splitlines()]
    w0 = [r for r in every if r["worker"] == "w0"]
    during = [r for r in w0 if stopped_at + 1.5 < _epoch(r["finished_at"]) < resumed_at]
    assert during == []  # at most the episode already running when it froze finished in the freeze
    assert "lease lost" in (tmp_path / "w0.log").read_text()
    reaps = [line for line in (tmp_path / "w1.log").read_text().splitlines() if "reaped unit=" in line]
    assert len(reaps) == 1 and "worker=w0" in reaps[0] and "no heartbeat for" in reaps[0], reaps


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


@pytest.fixture
def small_disk(tmp_path: Path, request: pytest.FixtureRequest):
    """A tmpfs (256 KiB, or the size the test's `disk_size` mark gives): a real full disk (ENOSPC)."""
    mark = request.node.get_closest_marker("disk_size")
    mount = tmp_path / "disk"
    mount.mkdir()
    argv = ["mount", "-t", "tmpfs", "-o", f"size={mark.args[0] if mark else '256k'}", "tmpfs", str(mount)]
    done = subprocess.run(argv, capture_output=True)
    assert done.returncode == 0, f"cannot mount a tmpfs (needs root): {done.stderr.decode()}"
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def run_local(env: dict[str, str], runs: Path, **extra: str) -> subprocess.CompletedProcess:
    """scripts/run_local.sh with 2 nodes over the run `demo` under `runs` (a pool_env run); the
    envs run in place (the local pool's own default), not staged."""
    env = {k: v for k, v in env.items() if k not in ("RUN_DIR", "STAGE_ENVS")}
    env.update(RUNS_ROOT=str(runs), STUDY_RUN="demo", **extra)
    argv = ["bash", str(REPO / "scripts" / "run_local.sh"), "2"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)


def fill(disk: Path, leave: int = 0) -> None:
    """Fill `disk` to its last block, then free `leave` bytes."""
    with open(disk / "filler", "ab", buffering=0) as filler, contextlib.suppress(OSError):
        while True:
            filler.write(b"x" * 4096)
    os.truncate(disk / "filler", os.path.getsize(disk / "filler") - leave)


def test_a_full_disk_stops_the_worker_with_one_line_naming_the_file(tmp_path: Path, small_disk: Path) -> None:
    run = make_run(small_disk / "run", [("s", "t0")])
    env = pool_env(run)
    fill(small_disk)
    proc = start_worker(env, "w0", tmp_path / "w0.log")
    try:
        code = proc.wait(60)
    finally:
        stop_group(proc)
    log = (tmp_path / "w0.log").read_text()
    assert code == 1, log
    assert "No space left on device" in log and "Traceback" not in log, log
    assert f"worker: {small_disk}" in log  # the message names the file it could not write


@pytest.mark.disk_size("2m")
def test_a_pool_stopped_by_a_full_disk_names_the_cause(tmp_path: Path, small_disk: Path) -> None:
    """The pool's summary names each log's last error, a full disk first (it used to say only
    `nodes finished with status 1`, the cause left in the workers' logs)."""
    run = make_run(small_disk / "runs" / "demo", [("s", f"t{i}") for i in range(4)])
    env = pool_env(run, UNIT_SEEDS="1", NODE_CACHE=str(tmp_path / "cache"), EVAL_TEST_NUM="400")
    fill(small_disk, leave=256 * 1024)  # room for the logs and a few hundred episodes, then ENOSPC
    done = run_local(env, small_disk / "runs", FASTBENCH_STEPS="1")
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"run_local: failed: worker-\S+\.log: worker: {small_disk}/\S+: No space left on device", last
    ), done.stdout + done.stderr
    assert "[pool] cause: worker-" in done.stdout and "Traceback" not in done.stdout + done.stderr


def test_the_temp_dir_of_a_killed_worker_is_swept_by_the_next_one(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(tempfile.gettempdir()) / f"{TEMP_PREFIX}{dead.pid}-left"
    live = Path(tempfile.gettempdir()) / f"{TEMP_PREFIX}{os.getpid()}-mine"
    elsewhere = Path(tempfile.gettempdir()) / f"eval-worker-1-{dead.pid}-theirs"  # another PID namespace
    for path in (stale, live, elsewhere):
        (path / "sub").mkdir(parents=True, exist_ok=True)
    try:
        worker = Worker(make_run(tmp_path / "run", [("s", "t0")]), "w0", Settings.from_env({}))
        assert not stale.exists() and live.exists()  # the dead pid's dir goes, a live pid's stays
        assert elsewhere.exists()  # pids of another namespace are not judged
        assert worker.tmp.exists()
    finally:
        for path in (stale, live, elsewhere):
            shutil.rmtree(path, ignore_errors=True)


def test_a_killed_sim_whose_episode_was_recorded_writes_nothing_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path / "run", [("s", "t0")])
    worker = Worker(run, "w0", Settings.from_env({}))
    unit = Unit("s", "t0", "s_clean", 0, 2, (0, 1))
    outcome = SimOutcome(returncode=-9, killed="stalled", seed=1)  # seed 1 had been recorded already
    slot = worker.add_slot()
    assert slot.settle(run, unit, outcome, [0, 1], {0, 1}, {"policy": "sleep"}, 1.0) == "stalled"
    log = capsys.readouterr().err
    assert "stalled: no episode was running, nothing recorded" in log and "recorded as errored" not in log
    assert read_tree(run.results).records == {}


def test_sigterm_releases_the_lease_and_exits_cleanly(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", f"t{i}") for i in range(3)])
    env = pool_env(run, FASTBENCH_STEPS="40", FASTBENCH_STEP_MS="100")  # 4 s episodes
    proc = start_worker(env, "w0", tmp_path / "w0.log")
    try:
        wait_for(lambda: bool(scan(run.leases).leased) and (tmp_path / "w0.log").read_text().count("claimed"),
                 60, "a claim")  # fmt: skip
        os.kill(proc.pid, signal.SIGTERM)  # eval_worker.sh execs the worker: this is the worker
        assert proc.wait(20) == 0
    finally:
        stop_group(proc)
    listing = scan(run.leases)
    assert all(os.listdir(run.leases / name) == [] for name in listing.leased), "lease not released"
    records = read_tree(run.results)
    assert records.torn_lines == [] and records.bad_lines == []
    assert "releasing the lease" in (tmp_path / "w0.log").read_text()


def test_local_pool_runs_node_scripts_over_one_queue(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs" / "demo", [(f"scene{i % 2}", f"task{i}") for i in range(8)])
    env = pool_env(run, UNIT_SEEDS="1", NODE_CACHE=str(tmp_path / "cache"), CPU_WORKERS="2")
    done = run_local(env, tmp_path / "runs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "units 16/16 done, 0 leased, 0 quarantined | episodes 16/16, 0 errored" in done.stdout
    check_finished(run, env, set())
    writers = {record["worker"] for record in read_tree(run.results).records.values()}
    assert writers and all(w.startswith("local-") and "-n" in w for w in writers)  # one id per node worker
    node_logs = "".join(log.read_text() for log in run.logs.glob("node-*.log"))
    assert "[stage] copying" not in node_logs and not (tmp_path / "cache" / "env").exists()


def test_time_aware_claims_inside_an_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(int(time.time()) + 100))
    end = slurmjob.allocation_end()
    assert end is not None and abs(end - time.time() - 100) < 2
    assert slurmjob.time_for_another(end, [])  # nothing measured yet: claim
    assert slurmjob.time_for_another(end, [20.0, 40.0])  # a mean unit (30 s) fits in the 100 s left
    assert not slurmjob.time_for_another(end, [90.0, 110.0])  # it would not finish before the end
    assert slurmjob.time_for_another(None, [90.0, 110.0])  # outside Slurm: always
