"""End to end through the debug launcher: the real worker in one process, its model server (replay)
and sim client as real child processes, on ManiSkill: 2 tasks × 2 seeds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.config.manifest import contract_hash, load_manifest
from harness.config.rundir import RunDir
from harness.episode.records import read_tree
from support.poolkit import REPO as ROOT
from support.poolkit import debug_worker


@pytest.mark.sim
def test_replay_policy_solves_the_shipped_bank_through_real_processes(tmp_path: Path) -> None:
    argv, env = debug_worker(
        tmp_path, "e2e", "table PickCube\ntable PushCube\n",
        POLICY="replay", EVAL_TEST_NUM="2", BENCH_CONFIG="clean", IMAGE_SIZE="128",
    )  # fmt: skip
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
