"""Persistent sim processes and sim slots, end to end with real worker, model server and sim processes:
one sim process serves several units (its pid), a sim SIGKILLed or SIGSTOPped mid-unit gives one
errored record and a new process, K slots hold their own leases against one model server, and
SIMS_PER_WORKER is checked and `auto` says why it chose its count."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from harness.config.rundir import RunDir
from harness.episode.records import read_tree
from support.poolkit import REPO, check_finished, make_run, pool_env, start_worker, stop_group, wait_for

STARTED = re.compile(r"worker=(\S+) sim process pid (\d+) started")


def _sim_pids(log: Path) -> list[tuple[str, int]]:
    """(writer, pid) of every sim process the worker started, in order."""
    return [(m.group(1), int(m.group(2))) for m in STARTED.finditer(log.read_text())]


def _run_worker(env: dict[str, str], log: Path, timeout: float) -> int:
    proc = start_worker(env, "w0", log)
    try:
        return proc.wait(timeout)
    finally:
        stop_group(proc)


def _raw_records(run: RunDir) -> list[dict]:
    """Every line of every record file (not only the latest per seed)."""
    files = run.results.rglob("_metrics*.jsonl")
    return [json.loads(line) for path in files for line in path.read_text().splitlines()]


@pytest.mark.sim
def test_one_maniskill_sim_process_runs_every_unit_of_the_worker(tmp_path: Path) -> None:
    """Three units on the real simulator, one sim process: imports and renderer start once."""
    run = make_run(tmp_path / "run", [("table", "PickCube"), ("table", "PushCube"), ("table", "PullCube")])
    env = pool_env(
        run, BENCHMARK="maniskill", POLICY=str(REPO / "policy" / "replay"), BUNDLE=str(REPO),
        USE_EVAL_SEEDS="1", EVAL_TEST_NUM="1", IMAGE_SIZE="64", STALL_TIMEOUT="120",
    )  # fmt: skip
    log = tmp_path / "w0.log"
    assert _run_worker(env, log, timeout=400) == 0, log.read_text()[-3000:]
    check_finished(run, env, set())
    records = read_tree(run.results).records
    assert len(records) == 3 and all(r["success"] for r in records.values()), records
    pids = _sim_pids(log)
    assert len(pids) == 1, log.read_text()  # one process start for the three units
    assert log.read_text().count("sim client finished 1 seeds") == 3


def _kill_mid_unit(tmp_path: Path, sig: signal.Signals, **extra: str) -> tuple[RunDir, Path]:
    run = make_run(tmp_path / "run", [("s", "t0"), ("s", "t1")])
    env = pool_env(run, EVAL_TEST_NUM="3", FASTBENCH_STEPS="20", FASTBENCH_STEP_MS="100", **extra)
    log = tmp_path / "w0.log"
    proc = start_worker(env, "w0", log)
    try:
        wait_for(lambda: re.search(r"seed 0: \w+ \(", log.read_text()) is not None, 60, "the first episode")
        ((_, pid),) = _sim_pids(log)
        os.kill(pid, sig)  # seed 1 of the first unit is running
        assert proc.wait(120) == 0, log.read_text()
    finally:
        stop_group(proc)
        if sig == signal.SIGSTOP:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    check_finished(run, env, set())  # the errored seed ran again: every seed has a trial
    pids = [p for _, p in _sim_pids(log)]
    assert len(pids) == 2 and pids[0] == pid and pids[1] != pid, log.read_text()  # restarted once
    return run, log


def test_a_sim_process_killed_mid_unit_gives_one_errored_record_and_a_new_process(tmp_path: Path) -> None:
    run, log = _kill_mid_unit(tmp_path, signal.SIGKILL)
    errored = [r for r in _raw_records(run) if r["error"]]
    assert len(errored) == 1 and errored[0]["error"] == "sim client exited with -9", errored
    assert errored[0]["seed"] == 1 and errored[0]["worker"] == "w0"
    assert "seed=1 sim client exited with -9: episode recorded as errored" in log.read_text()


def test_a_stopped_sim_process_is_killed_as_stalled_and_replaced(tmp_path: Path) -> None:
    run, log = _kill_mid_unit(tmp_path, signal.SIGSTOP, STALL_TIMEOUT="2")
    errored = [r for r in _raw_records(run) if r["error"]]
    assert [(r["seed"], r["error"]) for r in errored] == [(1, "stalled")], errored
    assert "seed=1 stalled: episode recorded as errored" in log.read_text()


def _live_owners(run: RunDir) -> set[str]:
    """Writers holding a lease now (an owner file not yet renamed to done/released). Read while the
    worker runs: any name may be renamed or deleted under the reading, which then skips it."""
    owners = set()
    for key in _listdir(run.leases):
        if key.startswith("."):  # staged claims, tombstones, clock probes: not leases
            continue
        for name in _listdir(run.leases / key):
            if name.startswith("owner."):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    owners.add(json.loads((run.leases / key / name).read_text())["worker"])
    return owners


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:  # gone (renamed, reaped, released) since it was listed
        return []


def test_the_lease_observer_never_fails_on_claims_renamed_under_it(tmp_path: Path) -> None:
    """Issue 20, item 7: the observer globbed `*/owner.*` and raised FileNotFoundError when a
    `.claim.*` dir it was listing was renamed onto a lease name meanwhile (the test failed, not the
    product). A thread renames claims as fast as it can while the observer reads for a while."""
    run = RunDir(tmp_path / "run")
    (run.leases / "held").mkdir(parents=True)
    (run.leases / "held" / "owner.g.0").write_text(json.dumps({"worker": "w0"}))
    stop = threading.Event()

    def claim_and_release() -> None:
        n = 0
        while not stop.is_set():
            stage = run.leases / f".claim.host.1.2.{n}"
            stage.mkdir()
            (stage / f"owner.{n}.0").write_text(json.dumps({"worker": "other"}))
            os.rename(stage, run.leases / f"unit{n}")
            shutil.rmtree(run.leases / f"unit{n}")
            n += 1

    churn = threading.Thread(target=claim_and_release)
    churn.start()
    try:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            assert "w0" in _live_owners(run)
    finally:
        stop.set()
        churn.join()


def test_sim_slots_hold_their_own_leases_against_one_model_server(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", f"t{i}") for i in range(6)])
    env = pool_env(run, SIMS_PER_WORKER="3", FASTBENCH_STEPS="15", FASTBENCH_STEP_MS="100")
    log = tmp_path / "w0.log"
    proc = start_worker(env, "w0", log)
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            owners = _live_owners(run)
            if len(owners) > len(seen):
                seen = owners
            time.sleep(0.1)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        stop_group(proc)
    check_finished(run, env, set())
    assert seen == {"w0", "w0-s1", "w0-s2"}  # three leases held at one time, one per slot
    writers = {r["worker"] for r in read_tree(run.results).records.values()}
    assert writers == {"w0", "w0-s1", "w0-s2"}
    assert len({pid for _, pid in _sim_pids(log)}) == 3
    text = log.read_text()
    assert text.count("model server pid") == 1  # one server for the three slots
    server_log = (run.logs / "server-w0.log").read_text()
    assert server_log.count("connected") >= 3


@pytest.mark.parametrize("value", ["0", "65", "two"])
def test_a_bad_sims_per_worker_is_refused_naming_the_knob(tmp_path: Path, value: str) -> None:
    run = make_run(tmp_path / "run", [("s", "t0")])
    log = tmp_path / "w0.log"
    assert _run_worker(pool_env(run, SIMS_PER_WORKER=value), log, timeout=60) == 2
    text = log.read_text()
    assert f"refusing to run: knob SIMS_PER_WORKER={value!r}: expected an integer 1..64 or auto" in text
    assert "Traceback" not in text


def test_auto_sims_per_worker_measures_the_first_unit_and_says_why(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", f"t{i}") for i in range(4)])
    env = pool_env(run, SIMS_PER_WORKER="auto", FASTBENCH_STEPS="5", FASTBENCH_STEP_MS="20")
    log = tmp_path / "w0.log"
    assert _run_worker(env, log, timeout=120) == 0, log.read_text()
    check_finished(run, env, set())
    line = next(x for x in log.read_text().splitlines() if "SIMS_PER_WORKER=auto:" in x)
    assert re.search(r"auto: \d+ \(sim [\d.]+ ms/step, model [\d.]+ ms/step; [\d.]+ free cores", line), line
    assert "bounds: model" in line


def test_a_worker_claims_the_units_of_the_task_its_sim_already_ran_first(tmp_path: Path) -> None:
    """One-seed slices of three tasks: after a task's first slice, its other slices come next."""
    run = make_run(tmp_path / "run", [("s", "a"), ("s", "b"), ("s", "c")])
    env = pool_env(run, EVAL_TEST_NUM="4", UNIT_SEEDS="1")
    log = tmp_path / "w0.log"
    assert _run_worker(env, log, timeout=120) == 0, log.read_text()
    check_finished(run, env, set())
    claimed = re.findall(r"unit=s__(\w)__\d+-\d+ claimed", log.read_text())
    assert len(claimed) == 12
    runs = [task for i, task in enumerate(claimed) if i == 0 or claimed[i - 1] != task]
    assert sorted(runs) == ["a", "b", "c"], claimed  # each task's slices claimed together


def test_sigterm_stops_every_slot_and_releases_their_leases(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", f"t{i}") for i in range(4)])
    env = pool_env(run, SIMS_PER_WORKER="2", FASTBENCH_STEPS="40", FASTBENCH_STEP_MS="100")  # 4 s episodes
    log = tmp_path / "w0.log"
    proc = start_worker(env, "w0", log)
    try:
        wait_for(lambda: _live_owners(run) == {"w0", "w0-s1"}, 60, "both slots holding a lease")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        stop_group(proc)
    assert _live_owners(run) == set()  # both leases released, none marked done
    assert not list(run.leases.glob("*/done.*"))
    records = read_tree(run.results)
    assert records.torn_lines == [] and records.bad_lines == []
    assert log.read_text().count("sim client stopped") == 2


def test_sim_slots_are_batched_together_by_their_model_server(tmp_path: Path) -> None:
    """K slots against one server: while one slow model call runs, the other slots' requests queue
    and go in the next call together (the server's batch statistics, logged at its stop, say so)."""
    run = make_run(tmp_path / "run", [("s", f"t{i}") for i in range(4)])
    env = pool_env(
        run, SIMS_PER_WORKER="4", SLEEP_POLICY_MS="150", FASTBENCH_STEPS="16", FASTBENCH_STEP_MS="5"
    )
    log = tmp_path / "w0.log"
    assert _run_worker(env, log, timeout=180) == 0, log.read_text()
    check_finished(run, env, set())
    server_log = (run.logs / "server-w0.log").read_text()
    stats = re.findall(r"batch stats: calls=(\d+) items=(\d+) max=(\d+)", server_log)
    assert stats, "the model server logged no batch statistics"
    calls, items, largest = map(int, stats[-1])
    assert items == 4 * 2 * 4  # 4 units x 2 seeds x 4 queries (16 steps, chunks of 4)
    assert largest > 1 and calls < items, stats[-1]


def test_a_node_knob_out_of_range_is_refused_at_worker_start(tmp_path: Path) -> None:
    """Knobs only nodes read (CRASH_LIMIT, STALL_TIMEOUT) are checked again when a worker starts:
    CRASH_LIMIT=0 would quarantine every unit before it runs and exit 0."""
    run = make_run(tmp_path / "run", [("s", "t0")])
    log = tmp_path / "w0.log"
    env = pool_env(run)
    env.update(CRASH_LIMIT="0", STALL_TIMEOUT="-5")
    assert _run_worker(env, log, timeout=60) == 2
    text = log.read_text()
    assert "refusing to run" in text and "CRASH_LIMIT='0'" in text and "STALL_TIMEOUT='-5'" in text
    assert "Traceback" not in text and not list(run.results.rglob("*.jsonl"))


def test_a_bad_env_cache_size_is_refused_naming_the_knob(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", "t0")])
    log = tmp_path / "w0.log"
    env = pool_env(run)  # a valid run; the worker's own environment carries the bad value
    env["SIM_ENV_CACHE"] = "-1"
    assert _run_worker(env, log, timeout=60) == 2
    text = log.read_text()
    assert "knob SIM_ENV_CACHE='-1': expected an integer 0..64" in text
    assert "Traceback" not in text
