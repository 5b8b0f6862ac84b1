"""Adaptive runs through real workers (fast benchmark, sleep policy): a decided cell's marker is written,
its remaining units are never claimed, and pools of different sizes, or a pool that loses a worker to
SIGKILL, reach the same decisions at the same stop points on the same outcomes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from harness.config.decided import marker_path, write_marker
from harness.config.rundir import RunDir
from harness.config.stoprule import parse_stop_rule
from harness.episode.records import read_tree
from harness.results.cell_decision import DECIDED, run_verdicts
from harness.runqueue import run_units
from support.poolkit import make_run, pool_env, start_worker, stop_group, wait_for

CELLS = [("s", "a"), ("s", "b")]
ADAPTIVE = {"EVAL_STOP": "precision:0.3", "EVAL_TEST_NUM": "40", "UNIT_SEEDS": "2"}  # decides at n=16


def run_pool(env: dict[str, str], n: int, logs: Path, tag: str) -> None:
    procs = [start_worker(env, f"{tag}{i}", logs / f"{tag}{i}.log") for i in range(n)]
    try:
        for proc in procs:
            assert proc.wait(180) == 0
    finally:
        for proc in procs:
            stop_group(proc)


def markers(run: RunDir) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(run.decided.glob("*.json"))}


def verdicts(run: RunDir, env: dict[str, str]) -> dict:
    return run_verdicts(
        parse_stop_rule(env["EVAL_STOP"]), run_units(run), read_tree(run.results).records, env
    )


def test_pools_of_different_sizes_reach_the_same_decisions(tmp_path: Path) -> None:
    found = {}
    for size in (1, 3):
        run = make_run(tmp_path / f"run{size}", CELLS)
        env = pool_env(run, **ADAPTIVE)
        run_pool(env, size, tmp_path, f"p{size}-")
        found[size] = (markers(run), verdicts(run, env))
        for v in found[size][1].values():
            assert v.state == DECIDED and v.saved > 0, v
        log = (tmp_path / f"p{size}-0.log").read_text()
        assert "no unit left to claim" in log
    assert found[1][0] == found[3][0]
    assert {m["n"] for m in found[1][0].values()} == {16}
    assert {c: (v.decision, v.stop) for c, v in found[1][1].items()} == {
        c: (v.decision, v.stop) for c, v in found[3][1].items()
    }
    one = found[1][1][("s", "a")]
    assert (one.ran, one.after, one.saved) == (16, 0, 24)  # one worker claims in seed order: no extra unit


def test_units_of_a_decided_cell_are_not_claimed(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", CELLS)
    env = pool_env(run, **{**ADAPTIVE, "EVAL_TEST_NUM": "6"})
    write_marker(run, "s", "a", {"rule": "precision:0.3", "decision": "precise", "n": 1})
    run_pool(env, 1, tmp_path, "w")
    tasks = {key[0] for key in read_tree(run.results).records}
    assert tasks == {"b"}  # every unit of cell a stayed unclaimed; b ran (it never decides on 6 seeds)
    assert not any(name.startswith("s__a__") for name in os.listdir(run.leases))
    assert verdicts(run, env)[("s", "b")].state == "capped"


def test_a_killed_worker_changes_no_decision(tmp_path: Path) -> None:
    """SIGKILL one of two workers mid-run; a fresh worker finishes the run; the decision is the same."""
    run = make_run(tmp_path / "run", CELLS)
    env = pool_env(run, **ADAPTIVE, FASTBENCH_STEP_MS="40", LEASE_TTL="3", LEASE_SKEW_S="0.5")
    victim = start_worker(env, "victim", tmp_path / "victim.log")
    other = start_worker(env, "other", tmp_path / "other.log")
    try:
        wait_for(lambda: (tmp_path / "victim.log").read_text().count("done") >= 2, 120, "two units done")
        os.killpg(victim.pid, signal.SIGKILL)
        assert other.wait(180) == 0
    finally:
        stop_group(victim)
        stop_group(other)
    run_pool(env, 1, tmp_path, "after")
    assert {m["n"] for m in markers(run).values()} == {16}
    assert {(v.decision, v.stop) for v in verdicts(run, env).values()} == {("precise", 16)}
    assert marker_path(run, "s", "a").exists()
