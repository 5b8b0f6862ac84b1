"""The errored record of an episode the worker had to kill carries that episode's wall time, from
when the sim client started it (the progress file's `started_at`), not the whole job's."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

from harness.episode.records import read_tree
from harness.worker.sim_slot import episode_wall_s
from support.poolkit import make_run, pool_env, run_worker

STALL_S = 3.0


def test_a_stalled_episode_is_recorded_with_its_own_wall_time(tmp_path: Path) -> None:
    """Issue 20: a stalled seed 1 was recorded with the job's wall time (seed 0's episode included)."""
    run = make_run(tmp_path / "run", [("s", "t0")])
    env = pool_env(
        run, EVAL_TEST_NUM="2", CRASH_LIMIT="1", STALL_TIMEOUT=str(STALL_S), FASTBENCH_HANG="t0/1",
        FASTBENCH_STEPS="20", FASTBENCH_STEP_MS="100",  # seed 0: a 2 s episode before seed 1 hangs
    )  # fmt: skip
    log = tmp_path / "w0.log"
    assert run_worker(env, log, timeout=180) == 0, log.read_text()
    assert "stalled: episode recorded as errored" in log.read_text()
    lines = [json.loads(x) for p in run.results.rglob("_metrics*.jsonl") for x in p.read_text().splitlines()]
    [trial] = [r for r in lines if r["seed"] == 0]
    [errored] = [r for r in lines if r["seed"] == 1]
    assert trial["error"] is None and errored["error"] == "stalled"
    # seed 1's episode started after seed 0's record was written: its wall time fits in the gap
    gap = datetime.fromisoformat(errored["finished_at"]) - datetime.fromisoformat(trial["finished_at"])
    assert errored["wall_s"] <= gap.total_seconds() + 0.001, (errored["wall_s"], gap, trial["wall_s"])
    assert errored["wall_s"] >= STALL_S * 0.5  # the stalled episode's own time, not nothing
    assert read_tree(run.results).records[("t0", "s_clean", 1)]["error"] == "stalled"


def test_the_wall_time_stays_within_the_assignment_and_needs_this_seeds_start(tmp_path: Path) -> None:
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"seed": 4, "step": 7, "started_at": time.time() - 30}))
    assert 29 <= episode_wall_s(progress, 4, 100.0) <= 100.0
    assert episode_wall_s(progress, 4, 5.0) == 5.0  # a clock step cannot stretch it past the job
    assert episode_wall_s(progress, 9, 12.5) == 12.5  # another seed's start: this one never began
    progress.unlink()
    assert episode_wall_s(progress, 4, 12.5) == 12.5
