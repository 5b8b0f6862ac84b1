"""Inspect and repair a run's lease queue:
`python -m harness.launch.leasectl {summary,list,reap,requeue} RUN`.

summary   one line: units done / leased / pending / quarantined
list      one line per unit (optionally only --state S): owner, heartbeat age, stale reason, errored attempts,
          last error
reap      reclaim dead leases now (the workers also do this on their own)
requeue   forget the errored attempts of the given units (or --quarantined: of every quarantined unit),
          so they get CRASH_LIMIT new attempts

RUN is a name under $RUNS_ROOT or a path containing '/'. Knobs (EVAL_TEST_NUM, UNIT_SEEDS,
CRASH_LIMIT, ...) must be those of the pool. `rm -rf RUN/queue.txt.leases` resets everything else.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from harness.config.paths import run_dir
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.process.failures import run_command
from harness.queue import reaper
from harness.queue.listing import ERRORED_ATTEMPT, UnitState, scan
from harness.runqueue import open_queue, queue_states


def resolve(run: str) -> RunDir:
    path = run_dir(run)
    if not (path / "queue.txt").is_file():
        raise SystemExit(f"leasectl: {path} is not a run dir (no queue.txt)")
    return RunDir(path)


def summary(states: list[UnitState]) -> str:
    counts = Counter(state.state for state in states)
    parts = [f"{counts[s]} {s}" for s in ("done", "leased", "pending", "quarantined")]
    return f"{len(states)} units: " + ", ".join(parts)


def row(state: UnitState) -> str:
    owner = state.owner or {}
    age = f"{state.heartbeat_age:.0f}s" if state.heartbeat_age is not None else "-"
    who = f"{owner.get('worker', '-')}@{owner.get('host', '-')}" if state.state == "leased" else "-"
    error = (state.last_error or "").strip().replace("\n", " ")[:80]
    tries = state.errored_attempts
    return f"{state.key:40} {state.state:11} {who:30} {age:>6} {tries:>3} {state.stale or ''} {error}"


def requeue(run: RunDir, keys: list[str]) -> int:
    """Forget the errored attempts of `keys` and remove their quarantined lease dirs (which block claims)."""
    removed = 0
    for name in scan(run.leases).names:
        key, sep, n = name.rpartition(ERRORED_ATTEMPT)
        if sep and n.isdigit() and key in keys:
            (run.leases / name).unlink(missing_ok=True)
            removed += 1
    for key in keys:
        view = reaper.inspect(run.leases, key, 0.0)
        if view is not None and view.quarantined:
            reaper.bury(run.leases, run.leases / key, key)
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("summary", "list", "reap", "requeue"))
    parser.add_argument("run", help="run name under $RUNS_ROOT, or a run dir path")
    parser.add_argument("keys", nargs="*", help="requeue: unit keys")
    parser.add_argument(
        "--state", choices=("done", "leased", "pending", "quarantined"), help="list: only these"
    )
    parser.add_argument("--quarantined", action="store_true", help="requeue: every quarantined unit")
    args = parser.parse_args(argv)
    run = resolve(args.run)
    settings = Settings.from_env(os.environ)
    if args.command == "reap":
        queue = open_queue(run, f"leasectl-{os.getpid()}", settings)
        queue.refresh()
        print(
            f"reclaimed {len(reaped := queue.reap_pass())} dead lease(s)"
            + "".join(f"\n  {k}" for k in reaped)
        )
        return 0
    states = queue_states(run, settings)
    if args.command == "summary":
        print(summary(states))
    elif args.command == "list":
        for state in states:
            if args.state in (None, state.state):
                print(row(state))
    else:
        keys = [s.key for s in states if s.state == "quarantined"] if args.quarantined else args.keys
        unknown = set(keys) - {s.key for s in states}
        if unknown:
            raise SystemExit(f"leasectl: not units of {run.root}: {', '.join(sorted(unknown))}")
        print(f"forgot {requeue(run, keys)} errored attempt(s) of {len(keys)} unit(s)")
    return 0


if __name__ == "__main__":
    sys.exit(run_command("leasectl", main))
