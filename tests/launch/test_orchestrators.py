"""The three orchestrators end to end, on the local pool and on the real Slurm test cluster (srun, submitit).

Each test runs the shell commands as the README gives them, with the fast test-double benchmark and
the sleep policy, and counts episode records: a resumed or filled-in run must never record a planned
episode twice. The code runs from a private snapshot of the repository, so edits others make to the
shared tree meanwhile cannot change the code hash under a running test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from support.codecopy import copy_code

ROOT = Path(__file__).resolve().parents[2]
UNITS = [("s1", "t1"), ("s1", "t2"), ("s2", "t1")]
LAUNCHERS = [
    pytest.param("local", id="local"),
    pytest.param("srun", id="srun", marks=pytest.mark.slurm),
    pytest.param("submitit", id="submitit", marks=pytest.mark.slurm),
]


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_code(tmp_path_factory.mktemp("repo"))


@pytest.fixture
def env(request: pytest.FixtureRequest, snapshot: Path, tmp_path: Path) -> dict[str, str]:
    """The environment of a user who sets knobs and runs an orchestrator from the snapshot."""
    launcher = request.param
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "USER", "LANG", "TMPDIR")}
    if launcher in ("srun", "submitit"):
        base.update(request.getfixturevalue("slurm"))
    for name, configs in (("bank1", ("clean", "clutter")), ("bank2", ("clean",))):
        for scene, task in UNITS:
            for config in configs:
                path = tmp_path / name / task / f"{scene}_{config}.txt"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("0 1 2 3" if name == "bank1" else "10 11")
    (tmp_path / "queue.txt").write_text("".join(f"{s} {t}\n" for s, t in UNITS))
    base.update(
        LAUNCHER=launcher,
        POOL_NODES="2",
        RUNS_ROOT=str(tmp_path / "runs"),
        BENCHMARK="tests.support.fastbench:FastBench",
        POLICY="tests/policies/sleep",
        SEEDS_ROOT=str(tmp_path / "bank1"),
        EVAL_TEST_NUM="2",
        RECORD_VIDEO="0",
        STAGE_ENVS="none",
        NODE_CACHE=str(tmp_path / "node_cache"),
        HEARTBEAT_S="1",
        LEASE_TTL="4",
        FASTBENCH_STEPS="3",
        FASTBENCH_STEP_MS="60",
    )
    return base


def orchestrator(snapshot: Path, name: str, *args: str) -> list[str]:
    return ["bash", str(snapshot / "orchestrators" / f"{name}.sh"), *args, "--progress-every", "5"]


def run(snapshot: Path, env: dict[str, str], name: str, *args: str, timeout: float = 400, **extra: str):
    cmd = orchestrator(snapshot, name, *args)
    return subprocess.run(cmd, env={**env, **extra}, capture_output=True, text=True, timeout=timeout)


def lines(run_dir: Path) -> list[dict]:
    """Every whole record line of a run, duplicates included (a redundant episode shows as two)."""
    out = []
    for path in sorted((run_dir / "eval_result").rglob("_metrics*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip().endswith("}")]
    return out


def trials(run_dir: Path) -> Counter:
    """How many trial records each (task, task_config, seed) has."""
    return Counter((r["task"], r["task_config"], r["seed"]) for r in lines(run_dir) if r.get("error") is None)


def planned(config: str, seeds: list[int]) -> set[tuple[str, str, int]]:
    return {(task, f"{scene}_{config}", seed) for scene, task in UNITS for seed in seeds}


def table(stdout: str) -> list[str]:
    """The rows of the results table an orchestrator prints last."""
    rows = stdout.rstrip().split("\n")
    return rows[next(i for i, row in enumerate(rows) if row.startswith("---")) + 1 :]


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("env", LAUNCHERS, indirect=True)
def test_sweep_resumed_after_a_kill_reruns_nothing(snapshot: Path, env: dict[str, str]) -> None:
    runs = Path(env["RUNS_ROOT"])
    sweep = ("--run-prefix", "sw", "--queue", str(Path(env["SEEDS_ROOT"]).parent / "queue.txt"))
    sweep += ("--configs", "clean", "clutter")
    proc = subprocess.Popen(
        orchestrator(snapshot, "sweep", *sweep),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: len(trials(runs / "sw_clutter")) >= 1, 300, "the second config to start")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    assert set(trials(runs / "sw_clean")) == planned("clean", [0, 1]), out
    before = lines(runs / "sw_clean") + [r for r in lines(runs / "sw_clutter") if r.get("error") is None]

    again = run(snapshot, env, "sweep", *sweep)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "sw_clean: 6/6 episodes, 3/3 units: complete, nothing to run" in again.stdout
    for config in ("clean", "clutter"):
        counts = trials(runs / f"sw_{config}")
        assert set(counts) == planned(config, [0, 1])
        assert max(counts.values()) == 1, counts  # no episode ran twice
    after = {json.dumps(r, sort_keys=True) for r in lines(runs / "sw_clean") + lines(runs / "sw_clutter")}
    assert {json.dumps(r, sort_keys=True) for r in before} <= after  # earlier records untouched
    assert [row.split()[:3] for row in table(again.stdout)] == [
        ["clean", "sw_clean", "6/6"],
        ["clutter", "sw_clutter", "6/6"],
    ]

    refused = run(snapshot, env, "sweep", *sweep, ACTION_SMOOTH="0.7")
    assert refused.returncode == 2
    assert "knob ACTION_SMOOTH: run.yaml has '0', this launch has '0.7'" in refused.stderr
    assert len(lines(runs / "sw_clean")) == 6


@pytest.mark.parametrize("env", LAUNCHERS, indirect=True)
def test_two_models_in_parallel_both_complete_with_the_pools_help(
    snapshot: Path, env: dict[str, str]
) -> None:
    runs = Path(env["RUNS_ROOT"])
    queue = str(Path(env["SEEDS_ROOT"]).parent / "queue.txt")
    args = (
        "--run-prefix",
        "par",
        "--queue",
        queue,
        "--model",
        "tests/policies/sleep",
        "--model",
        "tests/policies/noisy",
    )
    names = ("par_tests-policies-sleep", "par_tests-policies-noisy")
    gate = runs.parent / "gate"
    gate.mkdir()
    # The dedicated pools wait until the shared pool has recorded in their run: on a busy machine
    # they could otherwise finish a run before the shared pool starts (or reaches the second model).
    opened = threading.Event()

    def open_each_run_once_the_shared_pool_recorded_in_it() -> None:
        while not opened.is_set():
            for name in names:
                if lines(runs / name):  # only the shared pool can have recorded while the gate is shut
                    (gate / name).touch()
            opened.wait(0.3)

    watcher = threading.Thread(target=open_each_run_once_the_shared_pool_recorded_in_it, daemon=True)
    watcher.start()
    extra = {"EVAL_TEST_NUM": "4", "UNIT_SEEDS": "1", "FASTBENCH_GATE": f"{gate}:shared"}
    try:
        done = run(snapshot, env, "parallel_models", *args, **extra)
    finally:
        opened.set()
        watcher.join()
    assert done.returncode == 0, done.stdout + done.stderr
    for name in names:
        counts = trials(runs / name)
        assert set(counts) == planned("clean", [0, 1, 2, 3]) and max(counts.values()) == 1, counts
        pools = {r["worker"].rsplit("-w", 1)[0] for r in lines(runs / name)}
        assert len(pools) >= 2, f"{name}: only {pools} worked on it (the shared pool never helped)"
    assert [row.split()[0] for row in table(done.stdout)] == ["tests/policies/sleep", "tests/policies/noisy"]


@pytest.mark.parametrize("env", LAUNCHERS, indirect=True)
def test_fillin_runs_exactly_the_new_seeds(snapshot: Path, env: dict[str, str]) -> None:
    run_dir = Path(env["RUNS_ROOT"]) / "fi_clean"
    queue = str(Path(env["SEEDS_ROOT"]).parent / "queue.txt")
    first = run(snapshot, env, "sweep", "--run-prefix", "fi", "--queue", queue, "--configs", "clean")
    assert first.returncode == 0, first.stdout + first.stderr
    assert len(lines(run_dir)) == 2 * len(UNITS)

    more = run(snapshot, env, "fillin", "fi_clean", "--test-num", "4", EVAL_TEST_NUM="2")
    assert more.returncode == 0, more.stdout + more.stderr
    counts = trials(run_dir)
    assert set(counts) == planned("clean", [0, 1, 2, 3]) and max(counts.values()) == 1, counts
    assert len(lines(run_dir)) == 4 * len(UNITS)  # exactly 2 new episodes per unit

    bank = run(
        snapshot, env, "fillin", "fi_clean", "--seeds-root", str(Path(env["SEEDS_ROOT"]).parent / "bank2")
    )
    assert bank.returncode == 0, bank.stdout + bank.stderr
    assert set(trials(run_dir)) == planned("clean", [0, 1, 2, 3, 10, 11])
    assert len(lines(run_dir)) == 6 * len(UNITS)

    again = run(snapshot, env, "fillin", "fi_clean", "--test-num", "4")
    assert again.returncode == 0 and "nothing to run" in again.stdout
    assert len(lines(run_dir)) == 6 * len(UNITS)
    contracts = {r["contract"] for r in lines(run_dir)}
    assert len(contracts) == 1 and len(contracts.pop()) == 64  # one contract across every fill-in

    refused = run(snapshot, env, "fillin", "fi_clean", "--test-num", "4", EXEC_ACTIONS="2")
    assert (
        refused.returncode == 2
        and "knob EXEC_ACTIONS: run.yaml has '0', this launch has '2'" in refused.stderr
    )
