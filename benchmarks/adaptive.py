"""Adaptive-stopping benchmark: how many paired episodes the anytime-valid decision rule needs, and how
often it is wrong, against a fixed run of the cap (200 seeds per cell) analysed by exact McNemar.

No simulator: each simulated cell is a paired run of policies A and B on the same seeds, A's SR the base
(0.5), B's the base + dSR for dSR in {0, 0.1, 0.2, 0.3}, drawn from the 2x2 table with those margins and
the phi correlation `--rho` between a seed's two outcomes (0, the default, is independent outcomes: the
least favourable case for pairing; seeds that are hard for both make rho > 0 and the saving larger).
The adaptive rule is `harness.results.anytime.compare_decision` (run over the whole cell at once, along
the seeds): it stops at its first decision, or at the cap undecided. A decision is false when it says
"worse" with dSR >= 0, "better" with dSR <= 0, or "equivalent" with |dSR| >= margin; the guarantee is
<= 5% false decisions in every cell. It prints figures; it does not pass or fail.

Last line: `saving_at_0.3=<200 / mean episodes> saving_at_0.2=<...> false_decisions_pct=<worst cell>`.

Example:
  $SIM_PY benchmarks/adaptive.py --runs 4000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.stats import binom

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.results.anytime import ALPHA, decision_path  # noqa: E402

BASE_SR, CAP, DIFFS = 0.5, 200, (0.0, 0.1, 0.2, 0.3)


def paired_outcomes(rng: np.random.Generator, runs: int, sr_a: float, sr_b: float, rho: float) -> np.ndarray:
    """B − A per seed, shape (runs, CAP), from the 2x2 table with margins sr_a, sr_b and phi = rho."""
    both = sr_a * sr_b + rho * np.sqrt(sr_a * (1 - sr_a) * sr_b * (1 - sr_b))
    both = min(max(both, max(0.0, sr_a + sr_b - 1)), min(sr_a, sr_b))
    cells = np.array(
        [both, sr_b - both, sr_a - both, 1 - sr_a - sr_b + both]
    )  # both, B only, A only, neither
    drawn = rng.choice(4, size=(runs, CAP), p=cells / cells.sum())
    return np.select([drawn == 1, drawn == 2], [1.0, -1.0], 0.0)


def mcnemar_rejects(diffs: np.ndarray) -> np.ndarray:
    """The fixed design: exact two-sided McNemar at alpha on all CAP pairs, per run."""
    b_only, a_only = (diffs > 0).sum(axis=-1), (diffs < 0).sum(axis=-1)
    discordant = b_only + a_only
    p = np.minimum(1.0, 2 * binom.cdf(np.minimum(b_only, a_only), discordant, 0.5))
    return (discordant > 0) & (p < ALPHA)


def false_decision(codes: np.ndarray, diff: float, margin: float) -> np.ndarray:
    return (
        ((codes == -1) & (diff >= 0)) | ((codes == 1) & (diff <= 0)) | ((codes == 2) & (abs(diff) >= margin))
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=4000, help="simulated paired runs per dSR (default 4000)")
    parser.add_argument("--rho", type=float, default=0.0, help="phi correlation of a seed's two outcomes")
    parser.add_argument("--margin", type=float, default=0.1, help="equivalence margin on |dSR| (default 0.1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.runs < 1 or not -1 <= args.rho <= 1 or not 0 <= args.margin < 1:
        parser.error(
            f"--runs must be >= 1, --rho in [-1, 1] and --margin in [0, 1), "
            f"got {args.runs}, {args.rho} and {args.margin}"
        )
    rng = np.random.default_rng(args.seed)
    print(f"{args.runs} paired runs per cell, base SR {BASE_SR}, cap {CAP}, rho {args.rho}", end="")
    print(f", margin {args.margin}")
    print("dSR   mean_eps  saving  decided%  better%  worse%  equiv%  false%  fixed200_power%")
    savings, worst_false = {}, 0.0
    for diff in DIFFS:
        diffs = paired_outcomes(rng, args.runs, BASE_SR, BASE_SR + diff, args.rho)
        path = decision_path(diffs, args.margin)
        decided = (path != 0).any(axis=-1)
        episodes = np.where(decided, np.argmax(path != 0, axis=-1) + 1, CAP)
        codes = path[:, -1]
        false_pct = 100 * false_decision(codes, diff, args.margin).mean()
        worst_false = max(worst_false, false_pct)
        savings[diff] = CAP / episodes.mean()
        print(
            f"{diff:.1f}  {episodes.mean():8.1f}  {savings[diff]:6.2f}  {100 * decided.mean():8.1f}"
            f"  {100 * (codes == 1).mean():7.1f}  {100 * (codes == -1).mean():6.1f}"
            f"  {100 * (codes == 2).mean():6.1f}"
            f"  {false_pct:6.2f}  {100 * mcnemar_rejects(diffs).mean():15.1f}"
        )
    saving = f"saving_at_0.3={savings[0.3]:.2f} saving_at_0.2={savings[0.2]:.2f}"
    print(f"{saving} false_decisions_pct={worst_false:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
