"""Organize a run's episode records: video tree, results.txt (per scene and total), CSV, JSON, report.html.

Example: organize_results.py my_run my_model   →   $RUNS_ROOT/my_model/{results.txt,report.html,<scene>/...}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.config import knobs
from harness.process.failures import run_command
from harness.results import ResultsError
from harness.results.organize import Options, organize
from harness.results.videos import VIDEO_MODES


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", help="run name under $RUNS_ROOT, or a run dir path")
    parser.add_argument("model", help="model name: results go to $RUNS_ROOT/<model>/ unless --out")
    parser.add_argument("--out", type=Path, help="output dir (default: $RUNS_ROOT/<model>)")
    parser.add_argument(
        "--videos",
        choices=VIDEO_MODES,
        default=knobs.get("RESULTS_VIDEOS"),
        help="video tree: relative symlinks, copies, or none (default: $RESULTS_VIDEOS or link)",
    )
    parser.add_argument(
        "--split-by-contract",
        action="store_true",
        help="records of several contract hashes: one result set per contract, in "
        "<out>/contract-<hash>/ (default: refuse)",
    )
    args = parser.parse_args()
    if args.videos not in VIDEO_MODES:
        parser.error(f"RESULTS_VIDEOS={args.videos!r}: expected one of {', '.join(VIDEO_MODES)}")
    options = Options(args.run, args.model, args.out, args.videos, args.split_by_contract)
    try:
        organize(options, lambda line: print(line, file=sys.stderr, flush=True))
    except ResultsError as exc:
        print(f"organize_results: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(run_command("organize_results", main))
