"""`harness.evaluate()` from a training script's point of view: it returns at once with the eval
running in the background, `result()` is the per-task table as a pandas DataFrame and `episodes()`
the records, from the sim env and from the model env (the trainer's), and bad input is one clear
error. Run from a snapshot of the code, with the fast test-double benchmark and ckpt_sleep policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.codecopy import copy_code

SCRIPT = """
import json, sys, time
import harness
began = time.monotonic()
knobs = dict(USE_EVAL_SEEDS="0", RECORD_VIDEO="0", STAGE_ENVS="none", FASTBENCH_STEPS="2", CPU_WORKERS="1",
             SIMS_PER_WORKER="1", HEARTBEAT_S="1", LEASE_TTL="4")
try:
    handle = harness.evaluate(sys.argv[1], benchmark="tests.support.fastbench:FastBench", episodes=3,
                              policy="tests/policies/ckpt_sleep", queue=sys.argv[2], nodes=1, knobs=knobs)
except ValueError as exc:
    print(json.dumps({"refused_at_once": f"{type(exc).__name__}: {exc}"}))
    sys.exit(0)
returned = time.monotonic() - began
running = not handle.done()
try:
    table = handle.result(timeout=120)
except ValueError as exc:
    print(json.dumps({"refused": f"{type(exc).__name__}: {exc}"}))
    sys.exit(0)
print(json.dumps({
    "returned_s": returned, "running": running, "type": type(table).__name__, "run": handle.run_dir.name,
    "rows": table[["task", "sr_k", "n"]].values.tolist(), "columns": list(table.columns),
    "episodes": len(handle.episodes()),
}))
"""


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_code(tmp_path_factory.mktemp("repo"))


def call(snapshot: Path, tmp_path: Path, python: str, ckpt: Path) -> dict:
    (tmp_path / "queue.txt").write_text("s1 t1\ns1 t2\n")
    (tmp_path / "use.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "USER", "LANG", "TMPDIR")}
    env.update(EVAL_ROOT=str(snapshot), PYTHONPATH=str(snapshot), RUNS_ROOT=str(tmp_path / "runs"),
               SIM_PY=sys.executable, NODE_CACHE=str(tmp_path / "node_cache"))  # fmt: skip
    done = subprocess.run(
        [python, str(tmp_path / "use.py"), str(ckpt), str(tmp_path / "queue.txt")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def checkpoint(root: Path, step: int, kind: str = "sleep") -> Path:
    path = root / "ckpts" / f"step_{step}"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"kind": kind}))
    return path


@pytest.mark.parametrize("env_name", ["sim", "model"])
def test_evaluate_returns_at_once_and_result_is_the_per_task_table(
    snapshot: Path, tmp_path: Path, env_name: str
) -> None:
    python = sys.executable if env_name == "sim" else str(snapshot / "envs" / "model" / "bin" / "python")
    got = call(snapshot, tmp_path, python, checkpoint(tmp_path, 400))
    assert got["returned_s"] < 2 and got["running"]  # the job runs on in the background
    assert got["type"] == "DataFrame" and got["run"] == "ckpts_step0000400"  # the watcher's name
    assert got["rows"] == [["t1", 2, 3], ["t2", 2, 3]]  # fastbench: seeds 1, 2 succeed, 0 fails
    assert {"sr", "sr_lo", "sr_hi", "hsr", "hsr_lo", "hsr_hi", "errored"} <= set(got["columns"])
    assert got["episodes"] == 6
    assert (tmp_path / "runs" / "ckpts_curve" / "curve.json").is_file()  # one series with the watcher's


def test_bad_input_is_one_clear_error(snapshot: Path, tmp_path: Path) -> None:
    got = call(snapshot, tmp_path, sys.executable, tmp_path / "nope")
    assert got == {"refused_at_once": f"EvaluateRefused: checkpoint {tmp_path / 'nope'} does not exist"}
    ckpt = checkpoint(tmp_path, 7, kind="other")
    got = call(snapshot, tmp_path, sys.executable, ckpt)
    why = got["refused"]
    assert (
        why.startswith(f"EvaluateRefused: checkpoint {ckpt}: the policy cannot load it:") and "\n" not in why
    )
    assert "not a ckpt_sleep checkpoint (kind 'other')" in why
