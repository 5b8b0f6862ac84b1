"""Scale check of the lease queue without the cores: N workers over 10,000 units on a discrete-event clock.

Each simulated worker is a real `LeaseQueue` over one real leases dir; every claim, miss, listing,
done mark and reap pass is the real code's, and its filesystem calls are counted. Only time is
simulated: a unit's work is a span of virtual seconds, claims and marks take none, and the idle
back-off and the node's beacon (8 workers a node) run on the virtual clock. So the figures measure
what the claim order and the retry rules cost as the worker count grows, not this machine's CPU.
All workers list the queue at virtual time 0 (a pool starting together); a worker's first claim
takes the cheapest unit, as the worker loop does. Heartbeats are off: leases never age.

The workload is `benchmarks/lease_queue.py`'s skewed one (1% of the cells 20x the median's seeds),
sliced into units of one seed, with a price per cell (its tasks' episode length: 1, 2, 4 or 8 s,
so the units fall in 4 cost ranks as a run priced from step limits does; `--ranks 1`: one price, as
the unpriced units of `benchmarks/lease_queue.py`), each unit's work that price ±20%.
`--prefix-first` orders claims as an adaptive run (EVAL_STOP) does.

Prints one line per worker count; the last line is
`misses_per_claim_<N>=<n> listings_per_claim_<N>=<n> ops_per_claim_<N>=<n> makespan_ratio_<N>=<n> ...`.
A benchmark, not a test: it does not pass or fail.
"""

from __future__ import annotations

import argparse
import heapq
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.lease_queue import count_fs_ops, fs_ops
from harness.queue.leases import LeaseQueue, QueueSettings
from harness.queue.units import Unit, split

PER_NODE = 8  # workers a node share a beacon


def workload(units: int, ranks: int, rng: random.Random) -> tuple[list[Unit], dict[str, float]]:
    """About `units` one-seed units of skewed cells (1% 20x longer), each priced at 1 to 2**(ranks-1)
    seconds an episode; their virtual work."""
    cells = round(units / 11.9)  # a median cell has 10 seeds, 1% of the cells 200
    long = set(rng.sample(range(cells), max(2, cells // 100)))
    out, work = [], {}
    for i in range(cells):
        episode_s = 2.0 ** rng.randrange(ranks)  # 1, 2, 4, 8 s...: one cost rank each
        seeds = list(range(200 if i in long else 10))
        for unit in split(f"scene{i % 7}", f"task{i}", "bench", seeds, 1, episode_s):
            out.append(unit)
            work[unit.key] = unit.cost_s * rng.uniform(0.8, 1.2)
    return out, work


def simulate(
    root: Path, units: list[Unit], work: dict[str, float], workers: int, prefix_first: bool, counts: Counter
) -> dict:
    """Run `workers` simulated workers until every unit is done: makespan ÷ ideal and per-claim figures
    (`counts`: this process's FS operations, from `count_fs_ops`)."""
    settings = QueueSettings(ttl_s=600, heartbeat_s=5, skew_s=0, crash_limit=3, prefix_first=prefix_first)
    queues = [LeaseQueue(root, units, f"sim{i}", settings, random.Random(i)) for i in range(workers)]
    stop = threading.Event()
    waits: dict[int, float] = {}
    for i, queue in enumerate(queues):
        queue.heartbeat.add = queue.heartbeat.discard = lambda lease: None  # leases never age here

        def wait(seconds: float, _i: int = i) -> bool:  # the idle back-off, on the virtual clock
            waits[_i] = seconds
            stop.set()  # ends this claim() call: the worker tries again at now + seconds
            return False

        queue.beacon.wait = wait
    counts.clear()
    for queue in queues:
        queue.refresh()  # a pool that starts together: every worker lists before anyone claims
    version = [0] * workers
    events = [(0.0, i, 0, None) for i in range(workers)]  # (virtual time, worker, version, lease)
    first, idle = [True] * workers, set()
    claims, last_done, cpu = 0, 0.0, time.process_time()
    while events:
        now, i, ver, lease = heapq.heappop(events)
        if ver != version[i]:
            continue  # a wake-up that the beacon brought forward
        queue = queues[i]
        if lease is not None:
            queue.mark(lease, done=True)
            claims, last_done = claims + 1, now
            for j in range(i - i % PER_NODE, min(i - i % PER_NODE + PER_NODE, workers)):
                if j in idle:  # the beacon: idle siblings on this node list again now
                    queues[j]._woken = True  # what its wait would have returned
                    version[j] += 1
                    heapq.heappush(events, (now, j, version[j], None))
        stop.clear()
        lease = queue.claim(stop, shortest=first[i])
        idle.discard(i)
        if lease is not None:
            first[i] = False
            heapq.heappush(events, (now + work[lease.unit.key], i, version[i], lease))
        elif stop.is_set():
            idle.add(i)
            heapq.heappush(events, (now + waits[i], i, version[i], None))
    cpu = time.process_time() - cpu
    ideal = max(sum(work.values()) / workers, max(work.values()))
    return {
        "claims": claims,
        "makespan_ratio": last_done / ideal,
        "misses": counts["miss"] / claims,
        "listings": counts["listing"] / claims,
        "ops": fs_ops(counts) / claims,
        "cpu_ms": cpu / claims * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--units", type=int, default=10_000, help="about this many units (default 10000)")
    parser.add_argument("--workers", default="16,64,256", help="worker counts (default 16,64,256)")
    parser.add_argument("--ranks", type=int, default=4, help="cost ranks of the cells (default 4)")
    parser.add_argument("--prefix-first", action="store_true", help="claim order of an adaptive run")
    args = parser.parse_args()
    units, work = workload(args.units, args.ranks, random.Random(7))
    counts, last = count_fs_ops(), []
    order = "adaptive" if args.prefix_first else "fixed"
    print(f"{len(units)} units in {args.ranks} cost ranks, {order} order")
    for workers in (int(n) for n in args.workers.split(",")):
        root = Path(tempfile.mkdtemp(prefix="lease-scale-"))
        started = time.perf_counter()
        try:
            got = simulate(root / "queue.txt.leases", units, work, workers, args.prefix_first, counts)
        finally:
            shutil.rmtree(root)
        assert got["claims"] == len(units), got
        print(
            f"{workers:4d} workers: makespan/ideal {got['makespan_ratio']:.3f}, per claim: "
            f"{got['misses']:.2f} misses, {got['listings']:.3f} listings, {got['ops']:.1f} FS ops, "
            f"{got['cpu_ms']:.2f} ms CPU ({time.perf_counter() - started:.0f} s real)"
        )
        last += [
            f"misses_per_claim_{workers}={got['misses']:.2f}",
            f"listings_per_claim_{workers}={got['listings']:.3f}",
            f"ops_per_claim_{workers}={got['ops']:.1f}",
            f"makespan_ratio_{workers}={got['makespan_ratio']:.3f}",
        ]
    print(" ".join(last))


if __name__ == "__main__":
    main()
