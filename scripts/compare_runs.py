"""Compare two runs paired on the (scene, task, seed) trials both have: SR/HSR difference per task and in
total with Newcombe's paired 95% interval, exact McNemar p-values, per-task verdicts (better / worse / no
difference, Holm-adjusted over the tasks), and every flipped seed with both videos.

Example: compare_runs.py run_ckpt_a run_ckpt_b --html /tmp/a_vs_b.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.process.failures import run_command
from harness.results import ResultsError
from harness.results.compare import compare
from harness.results.compare_render import to_html, to_json, to_text
from harness.results.load import load_run, resolve_run
from harness.results.verdicts import ALPHA


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("a", help="run A: a name under $RUNS_ROOT, or a run dir path")
    parser.add_argument("b", help="run B (differences are B − A)")
    parser.add_argument("--json", type=Path, help="also write the comparison as JSON here")
    parser.add_argument("--html", type=Path, help="also write a page whose flipped seeds link both videos")
    parser.add_argument(
        "--alpha", type=float, default=ALPHA, help=f"level of the per-task verdicts (default {ALPHA})"
    )
    args = parser.parse_args()
    if not 0 < args.alpha < 1:
        parser.error(f"--alpha must be in (0, 1), got {args.alpha}")
    try:
        loaded = []
        for name in (args.a, args.b):
            run = resolve_run(name)
            print(f"reading records of {run.root}", file=sys.stderr, flush=True)
            loaded.append(load_run(run))
            for warning in loaded[-1].warnings():
                print(f"warning: {run.name}: {warning}", file=sys.stderr)
        comparison = compare(*loaded, alpha=args.alpha)
    except ResultsError as exc:
        print(f"compare_runs: {exc}", file=sys.stderr)
        return 2
    print(to_text(comparison), end="")
    if args.json:
        args.json.write_text(to_json(comparison))
    if args.html:
        args.html.write_text(to_html(comparison, args.html.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(run_command("compare_runs", main))
