"""End to end through the debug launcher: the real worker in one process, its model server (replay)
and sim client as real child processes, on ManiSkill: 2 tasks × 2 seeds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.manifest import contract_hash, load_manifest
from harness.config.rundir import RunDir
from harness.episode.records import read_tree

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.sim
def test_replay_policy_solves_the_shipped_bank_through_real_processes(tmp_path: Path) -> None:
    queue = tmp_path / "queue.txt"
    queue.write_text("table PickCube\ntable PushCube\n")
    env = dict(
        os.environ, PYTHONPATH=str(ROOT), EVAL_ROOT=str(ROOT), BUNDLE=str(ROOT), RUNS_ROOT=str(tmp_path)
    )
    env.update(
        POLICY="replay", EVAL_TEST_NUM="2", BENCH_CONFIG="clean", IMAGE_SIZE="128"
    )
    env.setdefault("MODEL_PY", str(ROOT / "envs" / "model" / "bin" / "python"))
    env.setdefault("SIM_PY", sys.executable)
    argv = [
        sys.executable,
        str(ROOT / "scripts" / "eval_one_worker.py"),
        "--run",
        "e2e",
        "--queue",
        str(queue),
    ]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = read_tree(RunDir(tmp_path / "e2e").results).records
    assert len(records) == 4
    contract = contract_hash(load_manifest(tmp_path / "e2e"))
    for record in records.values():
        assert record["success"] and record["error"] is None and record["contract"] == contract
        video = RunDir(tmp_path / "e2e").result_dir(record["task"], "replay", "table_clean", "")
        assert (video / record["video"]).stat().st_size > 1000
    assert "TOTAL" in result.stdout and "100.0%" in result.stdout
    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "claimed" not in rerun.stderr and "no unit left to claim" in rerun.stderr  # resumed: nothing ran
    assert read_tree(RunDir(tmp_path / "e2e").results).records == records
