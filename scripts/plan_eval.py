"""Plan an evaluation before spending a cluster-day: from a baseline SR, the smallest ΔSR worth seeing,
alpha and power, the episodes needed per task and in total, unpaired (two-proportion z-test) and paired
(exact McNemar, as compare_runs tests, with an assumed discordance), and the expected spend of an
adaptive run (EVAL_STOP=compare). The statistics: harness/results/planning.py.

Example: plan_eval.py --baseline 0.5 --delta 0.1 --tasks 10 --discordance 0.2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.process.failures import run_command
from harness.results.planning import Design, plan, plan_text


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", type=float, required=True, help="the baseline's SR, in [0, 1]")
    parser.add_argument("--delta", type=float, required=True, help="smallest ΔSR worth seeing, e.g. 0.05")
    parser.add_argument("--alpha", type=float, default=0.05, help="two-sided level (default 0.05)")
    parser.add_argument("--power", type=float, default=0.8, help="power to see --delta (default 0.8)")
    parser.add_argument("--tasks", type=int, default=1, help="number of tasks (default 1)")
    parser.add_argument(
        "--discordance",
        type=float,
        help="paired: assumed share of seeds whose outcome differs between the two runs (> |delta|); "
        "without it only the unpaired rows",
    )
    parser.add_argument("--cap", type=int, help="adaptive: EVAL_TEST_NUM (default: the paired one-task n)")
    parser.add_argument(
        "--margin", type=float, default=0.05, help="adaptive: EVAL_STOP's margin (default 0.05)"
    )
    parser.add_argument("--runs", type=int, default=2000, help="adaptive: simulated cells (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="adaptive: the simulation's seed (default 0)")
    args = parser.parse_args()
    try:
        design = Design(args.baseline, args.delta, args.alpha, args.power, args.tasks, args.discordance)
        if not 0 <= args.margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {args.margin}")
        print(plan_text(plan(design, args.cap, args.margin, args.runs, args.seed)), end="")
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(run_command("plan_eval", main))
