"""Task affinity in claiming: a queue tries the units its caller prefers (a task whose env its sim
process already keeps) first, and takes any other unit at once when none of those is free."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harness.config.create import create_run
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.queue.units import Unit
from harness.runqueue import open_queue


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunDir:
    for name, value in {
        "USE_EVAL_SEEDS": "0", "EVAL_TEST_NUM": "4", "UNIT_SEEDS": "1", "LEASE_TTL": "60",
        "HEARTBEAT_S": "0.2", "LEASE_SKEW_S": "0", "CRASH_LIMIT": "3", "BENCH_CONFIG": "clean",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.queue.write_text("".join(f"table task{i}\n" for i in range(6)))  # 6 tasks x 4 one-seed units
    create_run(run.root, run.queue)  # under the knobs above: units are planned from run.yaml
    return run


def _held(task: str):
    return lambda unit: unit.task == task


def test_preferred_units_are_claimed_first_then_the_rest(run: RunDir) -> None:
    queue = open_queue(run, "w0", Settings.from_env(os.environ))
    order = []
    while (lease := queue.claim(prefer=_held("task3"))) is not None:
        order.append(lease.unit.task)
        assert queue.mark(lease, done=True)
    assert order[:4] == ["task3"] * 4 and len(order) == 24 and "task3" not in order[4:]


def test_without_a_preference_the_order_is_the_queues_own_shuffle(run: RunDir) -> None:
    queue = open_queue(run, "w0", Settings.from_env(os.environ))
    first = [queue.claim().unit.task for _ in range(8)]
    assert first[:4] != ["task3"] * 4 and len(set(first)) > 1  # no accidental grouping by task


def test_a_preference_never_waits_when_its_units_are_taken(run: RunDir) -> None:
    other, mine = (
        open_queue(run, "w1", Settings.from_env(os.environ)),
        open_queue(run, "w0", Settings.from_env(os.environ)),
    )
    taken = [other.claim(prefer=_held("task3")) for _ in range(4)]  # every task3 unit is leased
    assert {lease.unit.task for lease in taken} == {"task3"}
    started = time.monotonic()
    lease = mine.claim(prefer=_held("task3"))
    assert time.monotonic() - started < 1.0  # at once: no idling for the preferred task
    assert isinstance(lease.unit, Unit) and lease.unit.task != "task3"
    assert mine.mark(lease, done=False) and all(other.mark(held, done=False) for held in taken)
