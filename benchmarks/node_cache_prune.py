"""What pruning a big node-cache entry costs a launch: the time `prune` holds the node lock.

Stages a copy of `--source` (default: the sim env, 3.6 GiB in ~69,000 files here) into a fresh
node cache on this machine's disk and writes it back (sync: a real prune deletes an entry written
long ago), then prunes it under the node lock, as `prepare` does when the cache is over
CACHE_MAX_GB, and times the prune (what the launch's start, and every other job on the node waiting
for the lock, pays) and, after it, the background deletion until the cache's trash is empty
(`harness/node/staging.py`). `--repeats` rounds, each with its own copy.
It prints figures; it does not pass or fail on speed.

Last line: `prune_s=<median> trash_empty_s=<median>`.

Example (about a minute a round: the copy dominates):
  $SIM_PY benchmarks/node_cache_prune.py --repeats 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.node.staging import GB, TRASH, node_lock, prune, stage, want  # noqa: E402


def one_round(source: Path, parent: Path) -> tuple[float, float]:
    """(seconds prune held the lock, seconds after it until the trash was empty) for one copy."""
    with tempfile.TemporaryDirectory(dir=parent) as tmp:
        cache = Path(tmp)
        wanted = want(cache, "env", source)
        print(f"  staging {wanted.size / GB:.2f} GB of {source} ...", flush=True)
        stage(wanted, log=lambda _msg: None)
        os.sync()
        with node_lock(cache):
            start = time.monotonic()
            removed = prune(cache, 0, in_use=set(), keep_labels=set())
            prune_s = time.monotonic() - start
        assert removed == [wanted.root], removed
        trash = cache / TRASH
        while trash.is_dir() and any(trash.iterdir()):
            time.sleep(0.02)
        return prune_s, time.monotonic() - start - prune_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", type=Path, default=ROOT / "envs" / "sim", help="tree to stage (envs/sim)")
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the cache goes")
    p.add_argument("--repeats", type=int, default=2, help="rounds, each with its own copy (default 2)")
    args = p.parse_args(argv)
    if not args.source.exists():
        p.error(f"--source {args.source} does not exist")
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    prunes, empties = [], []
    for i in range(args.repeats):
        print(f"round {i + 1}/{args.repeats}", flush=True)
        prune_s, empty_s = one_round(args.source.resolve(), args.dir)
        print(f"  prune held the node lock {prune_s:.3f} s; the trash was empty {empty_s:.1f} s later")
        prunes.append(prune_s)
        empties.append(empty_s)
    print(f"prune_s={statistics.median(prunes):.3f} trash_empty_s={statistics.median(empties):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
