"""A real adaptive run: the reference policy against its early checkpoint on the shipped bank, through
the local pool, real ManiSkill3 on the CPU, `EVAL_STOP=compare:<early run>:0.05`.

Kept small for the suite (one task, ADAPTIVE_SEEDS seeds a cell: 8 episodes; the docs' two tasks took
12 min on a busy 2-core machine): at that size the two checkpoints
are too close for any cell to be decided, so the cells end `capped` (docs/results.md, "Adaptive
evaluation", gives the full-bank figures). What must hold is that the run goes through the real pool,
every rate is anytime-valid and each cell states its decision or that EVAL_TEST_NUM capped it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_runs import pool_env, run_pool  # tests/reference is on sys.path (rootdir-less dir)

from support.referencekit import BANK, EARLY, SHIPPED
from support.wirekit import REPO

ADAPTIVE_SEEDS = os.environ.get("ADAPTIVE_SEEDS", "4")  # a bigger figure for the docs: ADAPTIVE_SEEDS=10
QUEUE = os.environ.get("ADAPTIVE_QUEUE", "table PullCube\n")  # docs: "table PullCube\ntable PushCube\n"


@pytest.mark.sim
def test_reference_against_its_early_checkpoint_stops_or_caps_every_cell(tmp_path: Path) -> None:
    shutil.copytree(SHIPPED, tmp_path / "checkpoints" / "reference")
    shutil.copytree(EARLY, tmp_path / "checkpoints" / "reference-early")
    (tmp_path / "seeds").symlink_to(BANK.parent)
    (tmp_path / "queue.txt").write_text(QUEUE)
    common = {"EVAL_TEST_NUM": ADAPTIVE_SEEDS, "UNIT_SEEDS": "2", "CPU_WORKERS": "1"}
    early = pool_env(tmp_path, STUDY_RUN="early", CKPT_NAME="reference-early", **common)
    done = run_pool(early, tmp_path / "queue.txt")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    final = pool_env(
        tmp_path, STUDY_RUN="final", CKPT_NAME="reference", EVAL_STOP="compare:early:0.05", **common
    )
    done = run_pool(final, tmp_path / "queue.txt")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sim_py = final.get("SIM_PY", str(REPO / "envs" / "sim" / "bin" / "python"))
    out = tmp_path / "table"
    organized = subprocess.run(
        [sim_py, str(REPO / "scripts" / "organize_results.py"), "final", "final_model", "--out", str(out),
         "--videos", "none"], env=final, capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert organized.returncode == 0, organized.stderr
    print((out / "table" / "results.txt").read_text())  # the docs' table (pytest -s)
    doc = json.loads((out / "results.json").read_text())
    assert doc["interval"] == "anytime-valid 95%"
    adaptive = doc["adaptive"]
    assert adaptive["rule"] == "compare:early:0.05"
    assert adaptive["cap"] == int(ADAPTIVE_SEEDS) * len(QUEUE.split("\n")[:-1])
    tasks = [r for r in doc["rows"] if r["level"] == "task"]
    assert tasks and all(r["state"] in ("decided", "capped") for r in tasks), tasks
    for r in tasks:  # a capped cell ran every seed; a decided one may have saved some
        assert r["state"] == "decided" or (r["n"] == int(ADAPTIVE_SEEDS) and r["saved"] == 0), r
