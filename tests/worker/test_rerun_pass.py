"""One pass of a unit attempts each of its seeds once (issue 20, item 4).

Which seeds a job attempted used to be read from the deduplicated winner of each seed: when an
older record of a writer id that sorts higher won (a trial of `zz` over a trial of `w0`, or an
errored attempt over an errored attempt), the seed `w0` had just run looked unattempted and ran
again: a 4-seed unit ran 10 episodes in one pass, `[0, 1, 2, 3, 0, 1, 2, 0, 1, 0]`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.poolkit import make_run, pool_env, start_worker, stop_group


def _run_worker(env: dict[str, str], worker_id: str, log: Path) -> int:
    proc = start_worker(env, worker_id, log)
    try:
        return proc.wait(120)
    finally:
        stop_group(proc)


def _seeds_run_by(run_root: Path, worker: str) -> list[int]:
    """The seeds `worker` recorded, in the order it recorded them (its own record files)."""
    seeds = []
    for path in sorted(run_root.rglob(f"_metrics.{worker}.jsonl")):
        seeds += [json.loads(line)["seed"] for line in path.read_text().splitlines() if line.strip()]
    return seeds


def test_a_rerun_without_resume_runs_each_seed_once_despite_a_higher_sorting_writer(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", "t0")])
    env = pool_env(run, EVAL_TEST_NUM="4")
    assert _run_worker(env, "zz-old", tmp_path / "zz.log") == 0  # its trials win every seed
    shutil.rmtree(run.leases)  # a clean re-lease: the unit is claimable again
    assert _run_worker({**env, "EVAL_RESUME_SEEDS": "0"}, "w0", tmp_path / "w0.log") == 0
    assert _seeds_run_by(run.results, "w0") == [0, 1, 2, 3], (tmp_path / "w0.log").read_text()


def test_seeds_that_always_error_are_each_attempted_once_a_pass(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", "t0")])
    env = pool_env(run, EVAL_TEST_NUM="4", FASTBENCH_CRASH="t0", CRASH_LIMIT="1")
    assert _run_worker(env, "zz-old", tmp_path / "zz.log") == 0  # its errored records win every seed
    shutil.rmtree(run.leases)
    assert _run_worker(env, "w0", tmp_path / "w0.log") == 0
    assert _seeds_run_by(run.results, "w0") == [0, 1, 2, 3], (tmp_path / "w0.log").read_text()
