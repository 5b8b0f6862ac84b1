"""The run's stopping rule (knob EVAL_STOP, part of the contract): when a (scene, task) cell may stop
before EVAL_TEST_NUM seeds, and the checks that make such a rule sound when the run is created.

    fixed                      every planned seed runs (the default)
    precision:<h>              a cell stops once its anytime-valid 95% interval of SR is at most ±h
    compare:<baseline>:<m>     a cell stops once the anytime-valid paired interval of dSR against the
                               baseline run's records on the same seeds excludes 0 (better / worse),
                               or lies inside ±m (equivalent; m = 0: never equivalent)

EVAL_TEST_NUM stays the cap. Only the rule is parsed and checked here; the decisions are taken on
records (`harness.results.cell_decision`), and the worker writes and honours their markers
(`harness.config.decided`, `harness.worker.stopping`). An adaptive run needs UNIT_SEEDS > 0: with whole-cell
units nothing could be left unclaimed, so such a run is refused rather than re-cut silently.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from harness.config.manifest import Manifest, ManifestError, load_manifest
from harness.config.paths import run_dir

FIXED = "fixed"
BASELINE_INFO = "stop_baseline"  # run.yaml's info: the compare baseline's directory, resolved at creation
Kind = Literal["fixed", "precision", "compare"]


@dataclass(frozen=True)
class StopRule:
    """A parsed EVAL_STOP: its kind and the numbers (and baseline run) it needs."""

    kind: Kind
    half_width: float | None = None  # precision: the interval's largest accepted half-width
    baseline: str | None = None  # compare: the baseline run, a name under $RUNS_ROOT or a path
    margin: float | None = None  # compare: |dSR| below it is "equivalent"
    # compare: the baseline's directory as the run's creation resolved it (run.yaml's info), so a
    # worker or report whose RUNS_ROOT differs still reads the baseline the run was checked against
    baseline_path: str | None = None

    @property
    def adaptive(self) -> bool:
        return self.kind != FIXED

    def baseline_dir(self, env: Mapping[str, str] = os.environ) -> Path:
        """The baseline run's dir: the one frozen at the run's creation, else $RUNS_ROOT/<name> (or
        the path given)."""
        if self.baseline is None:
            raise ValueError(f"EVAL_STOP={self.kind}: has no baseline run")
        return Path(self.baseline_path) if self.baseline_path else run_dir(self.baseline, env)


def _fraction(text: str, what: str, spec: str, allow_zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value < 1):
        bound = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"knob EVAL_STOP={spec!r}: {what} must be a number in {bound}, got {text!r}")
    return value


def parse_stop_rule(spec: str) -> StopRule:
    """EVAL_STOP's value as a rule; a ValueError naming the knob and what is wrong otherwise."""
    text = spec.strip()
    kind, _, rest = text.partition(":")
    if text == FIXED:
        return StopRule(FIXED)
    if kind == "precision" and rest:
        return StopRule("precision", half_width=_fraction(rest, "the half-width", spec, allow_zero=False))
    if kind == "compare" and ":" in rest:
        baseline, _, margin = rest.rpartition(":")
        if baseline.strip():
            return StopRule("compare", baseline=baseline, margin=_fraction(margin, "the margin", spec, True))
    raise ValueError(
        f"knob EVAL_STOP={spec!r}: expected `fixed`, `precision:<half-width>` (e.g. precision:0.10) "
        "or `compare:<baseline run>:<margin>` (e.g. compare:ref_run:0.05)"
    )


def run_rule(manifest: Manifest) -> StopRule:
    """The rule a run's contract froze (a run made before the knob existed is `fixed`), with the
    baseline's directory its creation resolved (a run made before that was kept: resolved now)."""
    rule = parse_stop_rule(manifest.knobs.get("EVAL_STOP", FIXED))
    frozen = manifest.info.get(BASELINE_INFO)
    return replace(rule, baseline_path=frozen) if rule.kind == "compare" and frozen else rule


def _baseline_problems(contract: dict[str, Any], n: int, baseline: Manifest) -> list[str]:
    """What keeps the baseline run from pairing with every planned seed of this run."""
    problems = []
    mine, theirs = contract["knobs"], baseline.knobs
    for knob in ("BENCHMARK", "BENCH_CONFIG"):
        if mine[knob] != theirs.get(knob):
            problems.append(f"knob {knob}: the baseline has {theirs.get(knob)!r}, this run {mine[knob]!r}")
    if contract["queue"]["sha256"] != baseline.contract["queue"]["sha256"]:
        problems.append("its queue lists other (scene, task) cells than this run's queue file")
    if contract["seeds"] != baseline.contract["seeds"]:
        problems.append("its seed bank differs (SEEDS_ROOT / USE_EVAL_SEEDS give other seeds)")
    if baseline.eval_test_num < n:
        problems.append(f"it planned EVAL_TEST_NUM={baseline.eval_test_num} seeds a cell, this run {n}")
    return problems


def check_stop_rule(contract: dict[str, Any], n: int, env: Mapping[str, str] = os.environ) -> StopRule:
    """The run's rule, refused (ManifestError naming the knob or the baseline run) when it cannot work:
    a bad EVAL_STOP, UNIT_SEEDS=0 with an adaptive rule, or a baseline that does not cover this run.
    A compare rule comes back with the baseline's directory resolved (`baseline_path`)."""
    knobs = contract["knobs"]
    try:
        rule = parse_stop_rule(knobs["EVAL_STOP"])
    except ValueError as exc:
        raise ManifestError(str(exc)) from None
    if not rule.adaptive:
        return rule
    if knobs["UNIT_SEEDS"].strip().lstrip("0") == "":
        raise ManifestError(
            f"EVAL_STOP={knobs['EVAL_STOP']} needs UNIT_SEEDS > 0 (seeds per unit, e.g. UNIT_SEEDS=2): "
            "with UNIT_SEEDS=0 a cell is one unit, so stopping it early would save nothing"
        )
    if rule.kind == "compare":
        where = rule.baseline_dir(env)
        try:
            baseline = load_manifest(where)
        except ManifestError as exc:
            raise ManifestError(
                f"EVAL_STOP baseline run {rule.baseline!r} ({where}) cannot be read: {exc}"
            ) from None
        problems = _baseline_problems(contract, n, baseline)
        if problems:
            listing = "".join(f"\n  - {p}" for p in problems)
            raise ManifestError(
                f"EVAL_STOP baseline run {rule.baseline!r} ({where}) does not cover this run:{listing}"
            )
        return replace(rule, baseline_path=str(where.resolve()))
    return rule
