"""LIBERO-PRO perturbations as task configs of BENCHMARK=libero (BENCH_CONFIG `<suite>_<perturbation>`):
a perturbed suite keeps the clean task names, so one queue file runs clean and perturbed and
compare_runs pairs the two runs by (scene, task, init state); orchestrators/sweep.sh runs both with
the oracle (two LIBERO episodes, about 1-2 min on a quiet 2-core machine). The refusal of an
unknown perturbation at run creation is in test_libero.py's table of bad inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.episode.bench.libero_suite import init_states, suite_tasks
from support.poolkit import REPO
from support.results_fixtures import new_run, record, write_records

SUITE = "libero_object"
TASK = "pick up the alphabet soup and place it in the basket"


def test_a_perturbed_suite_keeps_the_clean_names_and_rewords_only_what_it_rewrote() -> None:
    clean, lan, swap = (suite_tasks(config) for config in (SUITE, f"{SUITE}_lan", f"{SUITE}_swap"))
    assert list(lan) == list(swap) == list(clean)  # one queue file for all three
    assert lan[TASK].perturbation == "lan" and lan[TASK].suite == SUITE  # the clean suite's step limit
    assert lan[TASK].prompt == "grab alphabet soup and put it into basket"  # its BDDL's (:language)
    assert lan[TASK].bddl_file.parent.name == f"{SUITE}_lan"
    assert swap[TASK].prompt == "" and clean[TASK].prompt == ""  # the clean instruction, unchanged
    assert swap[TASK].init_states_file.startswith(f"{SUITE}_swap/")
    assert not np.array_equal(init_states(swap[TASK]), init_states(clean[TASK]))  # objects moved


def _compare(runs: Path, a: str, b: str) -> dict:
    out = runs / "comparison.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "compare_runs.py"), a, b, "--json", str(out)],
        env=dict(os.environ, RUNS_ROOT=str(runs)), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


def test_compare_runs_pairs_a_clean_and_a_perturbed_run_by_init_state(tmp_path: Path) -> None:
    clean, swapped = new_run(tmp_path, "c"), new_run(tmp_path, "s")
    write_records(clean, [record("libero", TASK, s, True, s != 2, bench_config=SUITE) for s in range(5)])
    write_records(swapped, [record("libero", TASK, s, s < 3, bench_config=f"{SUITE}_swap") for s in range(6)])
    comparison = _compare(tmp_path, "c", "s")
    (cell,) = comparison["tasks"]
    assert cell["name"] == f"libero/{TASK}" and cell["pairs"] == 5 and cell["only_b"] == 1
    assert cell["sr"]["a_only_success"] == 2 and cell["sr"]["b_only_success"] == 0  # init states 3, 4
    assert [flip["seed"] for flip in comparison["flips"]] == [2, 3, 4]  # 2: HSR only (a collision in A)


@pytest.mark.sim
def test_sweep_runs_clean_and_swapped_and_compare_runs_pairs_them(tmp_path: Path) -> None:
    (tmp_path / "queue.txt").write_text(f"libero {TASK}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.pop("ACTION_CONVENTION", None)
    env.update(
        LAUNCHER="local", POOL_NODES="1", CPU_WORKERS="1", RUNS_ROOT=str(tmp_path / "runs"),
        STAGE_ENVS="none", NODE_CACHE=str(tmp_path / "node_cache"), BENCHMARK="libero",
        BENCH_PARAMS="{privileged_state: true, image_size: 64}", POLICY="libero_oracle",
        USE_EVAL_SEEDS="0", EVAL_TEST_NUM="1", RECORD_VIDEO="0",
    )  # fmt: skip
    configs = (SUITE, f"{SUITE}_swap")
    argv = ["bash", str(REPO / "orchestrators" / "sweep.sh"), "--run-prefix", "lib"]
    argv += ["--queue", str(tmp_path / "queue.txt"), "--configs", *configs]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = Path(env["RUNS_ROOT"])
    for config in configs:
        (metrics,) = (runs / f"lib_{config}" / "eval_result").rglob("_metrics*.jsonl")
        (rec,) = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert rec["task"] == TASK and rec["seed"] == 0 and rec["task_config"] == f"libero_{config}"
        assert rec["success"] and rec["hard_success"] and rec["collision"] is None, rec
    cell = _compare(runs, f"lib_{SUITE}", f"lib_{SUITE}_swap")["pooled"]
    assert cell["pairs"] == 1 and cell["only_a"] == cell["only_b"] == cell["errored"] == 0
