"""Operator mistakes, as a table: each bad command line exits 2 (refused) with one or two lines on
stderr naming the input, never a traceback, and leaves every existing record byte for byte.

The run is created and finished once (fast test-double benchmark, sleep policy), then each case runs
on its own copy of it. The pool cases go through `scripts/run_local.sh`, as a user types them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = "s1 t1\ns2 t1\n"


def base_env(tmp: Path) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "ENVS_ROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        BUNDLE=str(tmp), RUNS_ROOT=str(tmp / "runs"), STUDY_RUN="r", POLICY="tests/policies/sleep",
        BENCHMARK="tests.support.fastbench:FastBench", SEEDS_ROOT="bank", EVAL_TEST_NUM="2", RECORD_VIDEO="0",
        CKPT_NAME="ckpt", NODE_CACHE=str(tmp / "cache"), HEARTBEAT_S="1", LEASE_TTL="4",
        FASTBENCH_STEPS="2", FASTBENCH_STEP_MS="2", CPU_WORKERS="1",
    )  # fmt: skip
    env.update(PYTHONPATH=str(ROOT), EVAL_ROOT=str(ROOT))
    env["SIM_PY"] = os.environ.get("SIM_PY", str(ROOT / "envs" / "sim" / "bin" / "python"))
    env["MODEL_PY"] = os.environ.get("MODEL_PY", str(ROOT / "envs" / "model" / "bin" / "python"))
    return env


def sh(args: list[str], env: dict[str, str], **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, env={**env, **extra}, capture_output=True, text=True, timeout=300, cwd=ROOT)


def pool(env: dict[str, str], **extra: str) -> subprocess.CompletedProcess:
    return sh(["bash", str(ROOT / "scripts" / "run_local.sh"), "1"], env, **extra)


def new_run(env: dict[str, str], **extra: str) -> subprocess.CompletedProcess:
    """scripts/new_run.py creating the run STUDY_RUN from the bundle's queue file."""
    env = {**env, **extra}
    queue = str(Path(env["BUNDLE"]) / "queue.txt")
    return sh([env["SIM_PY"], str(ROOT / "scripts" / "new_run.py"), env["STUDY_RUN"], "--queue", queue], env)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run (records on disk) with its bank, queue file and checkpoint."""
    tmp = tmp_path_factory.mktemp("finished")
    for scene in ("s1", "s2"):
        (tmp / "bank" / "t1").mkdir(parents=True, exist_ok=True)
        (tmp / "bank" / "t1" / f"{scene}_clean.txt").write_text("0 1 2 3")
    (tmp / "queue.txt").write_text(UNITS)
    (tmp / "checkpoints" / "ckpt").mkdir(parents=True)
    (tmp / "checkpoints" / "ckpt" / "weights.bin").write_bytes(b"w" * 100)
    env = base_env(tmp)
    made = new_run(env)
    assert made.returncode == 0, made.stderr
    done = pool(env)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp


def records(tmp: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tmp)): p.read_bytes() for p in sorted((tmp / "runs").rglob("_metrics*.jsonl"))}


def _edit_run_yaml(tmp: Path) -> None:
    path = tmp / "runs" / "r" / "run.yaml"
    path.write_text(path.read_text().replace("ACTION_SMOOTH: '0'", "ACTION_SMOOTH: '0.5'"))


def _bad_queue(tmp: Path) -> None:
    (tmp / "runs" / "r" / "queue.txt").write_text(UNITS + "s3\n")  # a scene without a task


def _no_bank(tmp: Path) -> None:
    (tmp / "bank" / "t1" / "s2_clean.txt").unlink()


def _no_ckpt(tmp: Path) -> None:
    shutil.rmtree(tmp / "checkpoints" / "ckpt")


def _nothing(tmp: Path) -> None:
    pass


CASES: list[tuple[str, Callable[[Path], None], Callable[..., subprocess.CompletedProcess], dict, str]] = [
    ("edited run.yaml", _edit_run_yaml, pool, {}, "run.yaml"),
    ("malformed queue.txt", _bad_queue, pool, {}, "queue.txt:3"),
    ("deleted seed bank file", _no_bank, pool, {}, "s2_clean.txt does not exist"),
    ("changed knob", _nothing, pool, {"ACTION_SMOOTH": "0.7"}, "knob ACTION_SMOOTH"),
    ("EVAL_TEST_NUM=0", _nothing, pool, {"EVAL_TEST_NUM": "0"}, "EVAL_TEST_NUM"),
    ("EVAL_TEST_NUM=-3", _nothing, pool, {"EVAL_TEST_NUM": "-3"}, "EVAL_TEST_NUM"),
    ("missing checkpoint", _no_ckpt, pool, {}, "checkpoint"),
    ("SIMS_PER_WORKER=0", _nothing, pool, {"SIMS_PER_WORKER": "0"}, "SIMS_PER_WORKER"),
    ("new_run, nonexistent CKPT_NAME", _nothing, new_run, {"STUDY_RUN": "r2", "CKPT_NAME": "nosuch"},
     "CKPT_NAME='nosuch'"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "mutate", "command", "extra", "named"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_command_line_is_refused_clearly_and_loses_nothing(
    finished: Path, tmp_path: Path, what: str, mutate, command, extra: dict, named: str
) -> None:
    tmp = tmp_path / "copy"
    shutil.copytree(finished, tmp, symlinks=True)  # the contract holds no absolute path: it verifies
    env = base_env(tmp)
    before = records(tmp)
    mutate(tmp)
    result = command(env, **extra)
    out = result.stdout + result.stderr
    assert result.returncode == 2, f"{what}: exit {result.returncode}\n{out[-3000:]}"
    assert named in result.stderr, f"{what}: stderr does not name {named!r}:\n{result.stderr[-3000:]}"
    assert "Traceback" not in out, f"{what}:\n{out[-3000:]}"
    assert records(tmp) == before
