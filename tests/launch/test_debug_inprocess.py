"""The in-process debug mode (`scripts/eval_one_worker.py --inprocess`, harness.launch.debug_episode):
one episode with the sim side's unit runner and the policy's connection handler in this one process
over a socketpair, writing the run's real record, with no child process at all, and with the
debugger's trace function reaching the policy's thread (so a pdb breakpoint stops in the policy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from harness.config.manifest import contract_hash, load_manifest
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.launch.debug_episode import WRITER_ID, run_inprocess
from harness.launch.newrun import new_run
from support.poolkit import REPO

KNOBS = {
    "BENCHMARK": "tests.support.fastbench:FastBench", "POLICY": "hold", "CKPT_NAME": "",
    "USE_EVAL_SEEDS": "0", "EVAL_TEST_NUM": "2", "UNIT_SEEDS": "0", "RECORD_VIDEO": "0",
    "FASTBENCH_STEPS": "2", "FASTBENCH_STEP_MS": "1", "POLICY_SERVER": "",
}  # fmt: skip


@pytest.fixture
def created_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RunDir, Path]:
    """A run over the fast benchmark and the hold policy, created (its git probe ran) before the test."""
    for name, value in {**KNOBS, "RUNS_ROOT": str(tmp_path / "runs"), "EVAL_CONTRACT": ""}.items():
        monkeypatch.setenv(name, value)  # EVAL_CONTRACT too: the mode sets it, the fixture puts it back
    queue = tmp_path / "queue.txt"
    queue.write_text("s1 t1\ns1 t2\n")
    run = RunDir(tmp_path / "runs" / "r")
    new_run(run.root, queue)
    return run, queue


def _children() -> set[str]:
    """The pids of this process's children, from /proc (every thread's list)."""
    found: set[str] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            found |= set((task / "children").read_text().split())
        except OSError:
            continue  # the thread ended meanwhile
    return found


def _forbid_children(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the in-process mode started a child process")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "spawnv", "spawnve", "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse)


def _records(run: RunDir, task: str) -> list[dict]:
    path = run.record_file(task, "hold", "s1_clean", "", WRITER_ID)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_one_episode_runs_in_this_process_and_writes_its_record(
    created_run: tuple[RunDir, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run, queue = created_run
    before = _children()
    _forbid_children(monkeypatch)
    lines: list[str] = []
    assert run_inprocess(Settings.from_env(os.environ), run, queue, report=lines.append) == 0, lines
    [record] = _records(run, "t1")
    assert (record["task"], record["scene"], record["seed"], record["error"]) == ("t1", "s1", 0, None)
    assert (record["policy"], record["worker"], record["steps"]) == ("hold", WRITER_ID, 2)
    assert record["contract"] == contract_hash(load_manifest(run.root))
    assert any("t1 s1_clean seed 0: fail" in line for line in lines), lines  # fastbench: seed 0 fails
    assert _children() == before
    assert not [t for t in threading.enumerate() if t.name == "inprocess-model"]  # its thread ended
    # the next call takes the next seed without a result; --task and --seed choose another unit
    assert run_inprocess(Settings.from_env(os.environ), run, queue, report=lines.append) == 0
    assert [r["seed"] for r in _records(run, "t1")] == [0, 1]
    assert (
        run_inprocess(Settings.from_env(os.environ), run, queue, task="t2", seed=1, report=lines.append) == 0
    )
    assert [(r["seed"], r["success"]) for r in _records(run, "t2")] == [(1, True)]
    assert _children() == before


def test_the_policy_thread_inherits_the_debuggers_trace(created_run: tuple[RunDir, Path]) -> None:
    run, queue = created_run
    seen: list[tuple[str, str]] = []

    def tracer(frame: FrameType, event: str, arg: Any) -> None:  # what pdb installs, reduced to calls
        if event == "call" and frame.f_code.co_filename.endswith("policy/hold/deploy_policy.py"):
            seen.append((threading.current_thread().name, frame.f_code.co_name))

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        code = run_inprocess(Settings.from_env(os.environ), run, queue, report=lambda line: None)
    finally:
        sys.settrace(previous)
    assert code == 0
    assert ("inprocess-model", "encode_obs") in seen, seen
    assert ("batcher", "generate_actions") in seen, seen  # the batcher's thread inherits the trace


def test_a_unit_or_seed_the_run_does_not_plan_is_refused_naming_what_it_plans(
    created_run: tuple[RunDir, Path],
) -> None:
    run, queue = created_run
    with pytest.raises(ValueError, match=r"no unit of task t9 in its queue \(it has: s1 t1, s1 t2\)"):
        run_inprocess(Settings.from_env(os.environ), run, queue, task="t9")
    with pytest.raises(ValueError, match=r"seed 7 is not planned for task t1 \(planned: 0 1\)"):
        run_inprocess(Settings.from_env(os.environ), run, queue, task="t1", seed=7)
    assert _records(run, "t1") == []


def test_the_cli_creates_the_run_and_runs_one_episode(tmp_path: Path) -> None:
    queue = tmp_path / "queue.txt"
    queue.write_text("s1 t1\n")
    env = {**os.environ, **KNOBS, "RUNS_ROOT": str(tmp_path / "runs"), "PYTHONPATH": str(REPO)}
    script = str(REPO / "scripts" / "eval_one_worker.py")
    base = [sys.executable, script, "--run", "r", "--queue", str(queue)]
    done = subprocess.run([*base, "--inprocess", "--seed", "1"], env=env, capture_output=True, text=True,
                          timeout=300, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "t1 s1_clean seed 1: success" in done.stdout and "record: " in done.stdout
    assert _records(RunDir(tmp_path / "runs" / "r"), "t1")[0]["seed"] == 1
    wrong = subprocess.run([*base, "--seed", "1"], env=env, capture_output=True, text=True, timeout=300,
                           cwd=REPO)  # fmt: skip
    assert wrong.returncode == 2 and "--seed: only with --inprocess" in wrong.stderr, wrong.stderr
