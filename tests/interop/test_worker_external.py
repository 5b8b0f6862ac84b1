"""A whole worker (the debug launcher) against an external vla-eval server: no model server is
started, the lease queue, contract, records and resume work as with ours."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from harness.config.manifest import load_manifest
from harness.episode.records import read_tree
from tests.interop.conftest import VLA_MAP
from tests.support.wirekit import REPO


def test_a_worker_runs_a_queue_against_an_external_server_and_resumes(
    tmp_path: Path, vla_server: Callable[..., str]
) -> None:
    (tmp_path / "map.yaml").write_text(VLA_MAP)
    (tmp_path / "queue.txt").write_text("table T\ntable U\n")
    env = {
        **os.environ, "PYTHONPATH": str(REPO), "EVAL_ROOT": str(REPO), "POLICY_SERVER": vla_server(),
        "POLICY_SERVER_MAP": str(tmp_path / "map.yaml"), "BENCHMARK": "tests.support.fastbench:FastBench",
        "USE_EVAL_SEEDS": "0", "EVAL_TEST_NUM": "2", "RECORD_VIDEO": "0", "RUNS_ROOT": str(tmp_path),
    }  # fmt: skip
    cmd = [sys.executable, str(REPO / "scripts" / "eval_one_worker.py"), "--run", str(tmp_path / "r")]
    cmd += ["--queue", str(tmp_path / "queue.txt")]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "4/4 planned episodes recorded" in first.stdout
    records = read_tree(tmp_path / "r" / "eval_result").records
    assert len(records) == 4 and {r["policy"] for r in records.values()} == {"vla-hold"}
    assert load_manifest(tmp_path / "r").contract["policy_server"]["protocol"] == "vla-eval"
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "model server pid external (vla-eval) loaded vla-hold" in first.stderr
    assert " sim: " not in again.stderr, again.stderr  # resumed: no episode ran twice
    assert len(read_tree(tmp_path / "r" / "eval_result").records) == 4
