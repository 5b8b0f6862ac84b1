"""Issue 62: workers that list the queue together must not all try the same units. Every worker sorts
its candidates alike (longest first), so a sort key that leaves few units tied sent them all to the
same ones: each try was a miss, and every MAX_MISSES misses a listing of the whole queue. Each test
failed on the code before: a cell's slice index was a sort key, every worker's first claim walked the
same list of cheapest units, and a band's taken leftovers cost MAX_MISSES misses and a listing."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from harness.queue import leases
from harness.queue.leases import DEMOTE_AFTER, LeaseQueue, QueueSettings
from harness.queue.units import Unit, split

SETTINGS = QueueSettings(ttl_s=60.0, heartbeat_s=5.0, skew_s=0.0, crash_limit=3)
WORKERS = 8


@pytest.fixture
def misses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The lease names that claims tried and found taken."""
    taken: list[str] = []
    real = os.rename

    def rename(src: str | Path, dst: str | Path) -> None:
        try:
            real(src, dst)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY) and Path(src).name.startswith(".claim."):
                taken.append(Path(dst).name)
            raise

    monkeypatch.setattr(os, "rename", rename)
    return taken


def _pool(root: Path, units: list[Unit]) -> list[LeaseQueue]:
    """WORKERS queues that all listed the queue before any of them claimed (a pool starting together)."""
    queues = [LeaseQueue(root, units, f"w{i}", SETTINGS, random.Random(i)) for i in range(WORKERS)]
    for queue in queues:
        queue.refresh()
    return queues


def test_workers_listing_together_spread_over_a_long_cells_slices(tmp_path: Path, misses: list[str]) -> None:
    units = split("table", "LongTask", "table_clean", list(range(64)), 1, seed_cost_s=10.0)
    queues = _pool(tmp_path, units)
    held = set()
    for _ in range(4):  # each worker claims in turn, from its listing of the start: half the cell
        for queue in queues:
            lease = queue.claim()
            assert lease is not None and lease.unit.key not in held
            held.add(lease.unit.key)
    assert len(misses) < len(held) / 2, misses  # 196 before: every worker wanted slice 0, then 1, ...


def test_first_claims_of_a_pool_starting_together_spread_over_the_cheapest_rank(
    tmp_path: Path, misses: list[str]
) -> None:
    units = [
        unit
        for i in range(16)
        for unit in split("table", f"task{i}", "table_clean", list(range(4)), 1, seed_cost_s=10.0 + i / 10)
    ]
    cheapest = min(units, key=lambda unit: (unit.cost_s, unit.lo))
    queues = _pool(tmp_path, units)
    firsts = [queue.claim(shortest=True) for queue in queues]
    assert firsts[0] is not None and firsts[0].unit == cheapest  # the first comer gets the cheapest
    assert all(lease is not None and lease.unit.rank == cheapest.rank for lease in firsts)
    assert len(misses) <= WORKERS, misses  # 28 before: worker k walked the k units taken before it


def test_a_band_taken_since_the_listing_goes_below_the_next_without_a_listing(
    tmp_path: Path, misses: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every worker takes the longest band first, so when a band runs out a listing's leftovers of
    it are all taken: before, each worker tried MAX_MISSES of them and listed the whole queue again."""
    long = split("table", "Long", "table_clean", list(range(12)), 1, seed_cost_s=100.0)
    short = split("table", "Short", "table_clean", list(range(12)), 1, seed_cost_s=10.0)
    late = LeaseQueue(tmp_path, long + short, "late", SETTINGS, random.Random(0))
    late.refresh()
    pool = LeaseQueue(tmp_path, long + short, "pool", SETTINGS, random.Random(1))
    taken = [pool.claim() for _ in long]  # the pool takes the long band after `late` listed it
    assert {lease.unit.task for lease in taken if lease is not None} == {"Long"}
    listings = []
    real_scan = leases.scan
    monkeypatch.setattr(leases, "scan", lambda root: listings.append(root) or real_scan(root))
    lease = late.claim()
    assert lease is not None and lease.unit.task == "Short"
    assert len(misses) == DEMOTE_AFTER and listings == [], (misses, listings)  # 9 misses, 1 listing before
