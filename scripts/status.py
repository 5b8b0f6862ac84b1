"""Live status of a run: units done/leased/pending/quarantined, episodes done of planned, success so far,
throughput and ETA, live leases with owner and heartbeat age (stale ones flagged), recent errors;
in an adaptive run (EVAL_STOP) each cell's state and the episodes saved, decided cells as they happen.
Reads only: safe to run while the pool runs.

Example: status.py my_run --watch
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.live import Live

from harness.config.settings import Settings
from harness.process.failures import run_command
from harness.results import ResultsError
from harness.results.load import resolve_run
from harness.results.status import collect
from harness.results.status_view import render


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", help="run name under $RUNS_ROOT, or a run dir path")
    parser.add_argument("--watch", action="store_true", help="refresh in place until Ctrl-C")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between refreshes (default 5)")
    args = parser.parse_args()
    if args.interval <= 0:
        parser.error(f"--interval {args.interval}: expected a positive number of seconds")
    settings = Settings.from_env(os.environ)  # the queue's timing knobs judge the leases
    console = Console() if sys.stdout.isatty() else Console(width=160)  # a pipe or log: no 80-column wrap
    try:
        run = resolve_run(args.run)
        if not args.watch:
            console.print(render(collect(run, settings)))
            return 0
        with Live(render(collect(run, settings)), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(render(collect(run, settings)), refresh=True)
    except ResultsError as exc:
        print(f"status: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(run_command("status", main))
