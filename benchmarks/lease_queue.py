"""Benchmark of the filesystem lease queue: claim throughput, FS operations per claim, makespan.

Phase 1: UNITS no-op units claimed and marked done by WORKERS processes: claims per second and
filesystem operations per claim (every mkdir, rename, open, stat, utime, listdir, unlink, rmdir and
write the queue makes, counted in each worker process). On local disk by default; `--root DIR` runs
it in DIR instead, once per `--root`, all in one run, so filesystems compare side by side.
`--root DIR1,DIR2` is one directory seen through two mounts (two NFS client mounts, as two nodes
see a run dir): the workers alternate between them. tests/nfs/ shows how to get two kernel NFS
client mounts on a machine without NFS (`python tests/nfs/uml.py up`, then run this inside the guest).
Phase 2: makespan against the ideal max(total work / workers, longest unit) for a skewed workload
(a few cells 20x longer than the median cell), once with whole cells as units and once with
seed-slice units (UNIT_SEEDS). Work is a sleep, so the figures measure the queue, not the CPU.
`--skew seeds`: the long cells have 20x the episodes; `--skew episodes`: 20x longer episodes.

Each run also prints, per claim: wall ms in claim + mark, misses (a claim's rename that found the unit
taken), listings of the whole leases dir (O(units) on the server) and CPU ms (the worker process's).
Prints one line per measurement; the last line is `claims_per_s=<n> ops_per_claim=<n> makespan_ratio=<n>
misses_per_claim=<n> listings_per_claim=<n> cpu_ms_per_claim=<n>` (the last four of the seed-slice run).
A benchmark, not a test: it does not pass or fail.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.config.rundir import Cell, RunDir
from harness.config.settings import Settings
from harness.queue.listing import scan
from harness.queue.units import Unit, split
from harness.runqueue import open_queue

COUNTED = ("mkdir", "rmdir", "rename", "open", "unlink", "utime", "listdir", "scandir", "stat", "lstat")
COUNTED += ("fstat", "write")


def count_fs_ops() -> Counter:
    """Wrap this process's `os` filesystem calls with counters (the queue calls them through `os`).
    Two more, not FS operations: `miss`, a claim's rename that failed because another worker holds
    the unit (or it is done), and `listing`, a listdir of the whole leases dir."""
    counts: Counter = Counter()
    for name in COUNTED:
        real = getattr(os, name)

        def wrapper(*args, _real=real, _name=name, **kwargs):
            counts[_name] += 1
            if _name == "listdir" and str(args[0]).endswith(".leases"):
                counts["listing"] += 1
            try:
                return _real(*args, **kwargs)
            except OSError:
                if _name == "rename" and Path(args[0]).name.startswith(".claim."):
                    counts["miss"] += 1
                raise

        setattr(os, name, wrapper)
    return counts


def fs_ops(counts: Counter) -> int:
    return sum(n for name, n in counts.items() if name in COUNTED)


def worker(run: RunDir, units: list[Unit], wid: int, durations: dict[str, float], gate, out) -> None:
    queue = open_queue(run, f"bench{wid}", Settings.from_env(os.environ), units, random.Random(wid))
    counts = count_fs_ops()
    gate.wait()
    cpu = time.process_time()
    claims, last_done, in_queue, overshoot = 0, 0.0, 0.0, 0.0
    while True:
        t0 = time.perf_counter()
        lease = queue.claim()
        t1 = time.perf_counter()
        if lease is None:
            break
        nominal = durations.get(lease.unit.key, 0.0)
        time.sleep(nominal)
        t2 = time.perf_counter()
        queue.mark(lease, done=True)
        claims, last_done = claims + 1, time.time()
        in_queue += (t1 - t0) + (time.perf_counter() - t2)
        overshoot += (t2 - t1) - nominal
    cpu = time.process_time() - cpu
    out.put((claims, fs_ops(counts), last_done, in_queue, overshoot, counts["miss"], counts["listing"], cpu))


def run_pool(
    units: list[Unit], workers: int, durations: dict[str, float], label: str, mounts: list[Path] | None = None
) -> tuple[float, int, int, str]:
    """Seconds from the common start until the last unit was done, claims, FS operations (the
    idle workers' polling until they see that nothing is left included), and the per-claim figures
    as `name=value` words. The run dir is made in
    `mounts[0]` (default: the temp dir); worker i sees it through `mounts[i % len(mounts)]`."""
    if mounts:
        mounts[0].mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="lease-bench-", dir=mounts[0] if mounts else None))
    views = [RunDir(mount / root.name) for mount in mounts] if mounts else [RunDir(root)]
    run = views[0]
    ctx = mp.get_context("fork")
    gate, out = ctx.Barrier(workers + 1), ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(views[i % len(views)], units, i, durations, gate, out))
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()
    gate.wait()
    start = time.time()
    results = []
    while len(results) < workers:
        while not out.empty():
            results.append(out.get())
        done = len(scan(run.leases).done) if run.leases.exists() else 0
        print(
            f"\r  {label}: {done}/{len(units)} units done, {time.time() - start:6.1f} s",
            end="",
            file=sys.stderr,
        )
        time.sleep(0.5)
    print(file=sys.stderr)
    for proc in procs:
        proc.join()
    assert len(scan(run.leases).done) == len(units), "not every unit was marked done"
    shutil.rmtree(root)
    claims = sum(r[0] for r in results)
    per_claim = (sum(r[i] for r in results) / max(claims, 1) for i in range(3, 8))
    in_queue, overshoot, misses, listings, cpu = per_claim
    print(
        f"  {label}: per claim {in_queue * 1000:.1f} ms in claim+mark, {overshoot * 1000:.1f} ms sleep "
        f"overshoot, {misses:.2f} misses, {listings:.3f} listings, {cpu * 1000:.2f} ms CPU"
    )
    words = f"misses_per_claim={misses:.2f} listings_per_claim={listings:.3f}"
    words += f" cpu_ms_per_claim={cpu * 1000:.2f}"
    return max(r[2] for r in results) - start, claims, sum(r[1] for r in results), words


def skewed_cells(cells: int, seeds: int, skew: str, rng: random.Random) -> list[tuple[Cell, int, float]]:
    """(cell, seed count, seconds per episode): 1% of the cells (at least 2) 20x the median cell."""
    long = set(rng.sample(range(cells), max(2, cells // 100)))
    out = []
    for i in range(cells):
        factor = 20 if i in long else 1
        count = seeds * (factor if skew == "seeds" else 1)
        out.append((Cell(f"scene{i % 7}", f"task{i}"), count, float(factor if skew == "episodes" else 1)))
    return out


def makespan(args: argparse.Namespace, unit_seeds: int) -> tuple[float, str]:
    """Makespan / ideal of the skewed workload cut into units of `unit_seeds`, and its per-claim words."""
    units, durations = [], {}
    for cell, count, factor in skewed_cells(args.cells, args.seeds, args.skew, random.Random(7)):
        for unit in split(cell.scene, cell.task, f"{cell.scene}_bench", list(range(count)), unit_seeds):
            units.append(unit)
            durations[unit.key] = len(unit.seeds) * args.episode_s * factor
    ideal = max(sum(durations.values()) / args.workers, max(durations.values()))
    label = f"makespan, {'whole cells' if unit_seeds == 0 else f'slices of {unit_seeds}'}"
    wall, _, _, words = run_pool(units, args.workers, durations, label)
    print(
        f"{label}: {len(units)} units, ideal {ideal:.2f} s, makespan {wall:.2f} s, ratio {wall / ideal:.3f}"
    )
    return wall / ideal, words


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--units", type=int, default=10_000, help="no-op units of phase 1 (default 10000)")
    parser.add_argument("--workers", type=int, default=64, help="worker processes (default 64)")
    parser.add_argument("--cells", type=int, default=200, help="cells of the skewed workload (default 200)")
    parser.add_argument("--seeds", type=int, default=10, help="episodes of a median cell (default 10)")
    parser.add_argument(
        "--episode-s", type=float, default=0.25, help="seconds of a median episode (default 0.25)"
    )
    parser.add_argument("--unit-seeds", type=int, default=1, help="UNIT_SEEDS of the slice run (default 1)")
    parser.add_argument(
        "--skew", choices=("seeds", "episodes"), default="seeds", help="what makes long cells long"
    )
    parser.add_argument(
        "--root", action="append", metavar="DIR[,DIR2]", default=[],
        help="run phase 1 in DIR (repeatable: one phase 1 each, side by side); DIR,DIR2: one directory "
        "through two mounts, the workers alternating between them (default: local disk)",
    )  # fmt: skip
    parser.add_argument("--throughput-only", action="store_true", help="phase 1 only (no makespan runs)")
    args = parser.parse_args()
    os.environ.update({"LEASE_TTL": "600", "HEARTBEAT_S": "5"})

    units = [Unit("bench", f"t{i}", "bench", 0, 1, (i,)) for i in range(args.units)]
    figures = []
    for spec in args.root or [""]:
        mounts = [Path(p) for p in spec.split(",")] if spec else None
        label = f"throughput on {spec}" if spec else "throughput"
        wall, claims, ops, _ = run_pool(units, args.workers, {}, label, mounts)
        figures.append((spec or "local", claims / wall, ops / claims))
        print(f"{label}: {claims} claims by {args.workers} processes in {wall:.2f} s: "
              f"{claims / wall:.0f} claims/s, {ops / claims:.1f} FS ops per claim")  # fmt: skip
    if len(figures) > 1:
        for spec, claims_per_s, ops_per_claim in figures:
            print(f"root={spec} claims_per_s={claims_per_s:.0f} ops_per_claim={ops_per_claim:.1f}")
    _, claims_per_s, ops_per_claim = figures[0]
    if args.throughput_only:
        print(f"claims_per_s={claims_per_s:.0f} ops_per_claim={ops_per_claim:.1f}")
        return
    makespan(args, 0)
    ratio, words = makespan(args, args.unit_seeds)
    print(
        f"claims_per_s={claims_per_s:.0f} ops_per_claim={ops_per_claim:.1f}",
        f"makespan_ratio={ratio:.3f}",
        words,
    )


if __name__ == "__main__":
    main()
