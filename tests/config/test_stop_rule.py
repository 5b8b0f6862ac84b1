"""EVAL_STOP: parsing, and the run-creation checks that refuse a rule that cannot work (naming why)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.create import create_run
from harness.config.manifest import ManifestError, load_manifest
from harness.config.stoprule import StopRule, parse_stop_rule, run_rule
from support.poolkit import make_run, pool_env


@pytest.mark.parametrize(
    ("spec", "rule"),
    [
        ("fixed", StopRule("fixed")),
        ("precision:0.10", StopRule("precision", half_width=0.1)),
        ("compare:ref_run:0.05", StopRule("compare", baseline="ref_run", margin=0.05)),
        ("compare:/abs/runs/ref:0", StopRule("compare", baseline="/abs/runs/ref", margin=0.0)),
    ],
)
def test_rules_parse(spec: str, rule: StopRule) -> None:
    assert parse_stop_rule(spec) == rule


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("sometimes", "expected `fixed`, `precision:<half-width>`"),
        ("precision:", "expected `fixed`"),
        ("precision:0", "the half-width must be a number in (0, 1)"),
        ("precision:wide", "the half-width must be a number in (0, 1)"),
        ("compare:ref", "expected `fixed`"),
        ("compare::0.05", "expected `fixed`"),
        ("compare:ref:1.5", "the margin must be a number in [0, 1)"),
    ],
)
def test_bad_rules_are_refused_naming_the_knob(spec: str, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_stop_rule(spec)
    assert f"knob EVAL_STOP={spec!r}" in str(caught.value) and says in str(caught.value)


def test_an_adaptive_rule_with_whole_cell_units_is_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", "t")])
    with pytest.raises(ManifestError, match=r"EVAL_STOP=precision:0.2 needs UNIT_SEEDS > 0"):
        pool_env(run, EVAL_STOP="precision:0.2", UNIT_SEEDS="0")
    assert not run.manifest.exists()


def test_a_compare_baseline_must_exist_and_cover_the_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    missing = make_run(runs / "r1", [("s", "t")])
    with pytest.raises(ManifestError, match=r"EVAL_STOP baseline run 'base' \(.*runs/base\) cannot be read"):
        pool_env(missing, RUNS_ROOT=str(runs), EVAL_STOP="compare:base:0.05", UNIT_SEEDS="2")

    base = make_run(runs / "base", [("s", "t")])
    pool_env(base, EVAL_TEST_NUM="4")
    short = make_run(runs / "r2", [("s", "t"), ("s", "u")])
    with pytest.raises(ManifestError) as caught:
        pool_env(short, RUNS_ROOT=str(runs), EVAL_STOP="compare:base:0.05", UNIT_SEEDS="2", EVAL_TEST_NUM="6")
    text = str(caught.value)
    assert "EVAL_STOP baseline run 'base'" in text and "does not cover this run" in text
    assert "other (scene, task) cells" in text and "planned EVAL_TEST_NUM=4 seeds a cell, this run 6" in text

    fits = make_run(runs / "r3", [("s", "t")])
    env = pool_env(
        fits, RUNS_ROOT=str(runs), EVAL_STOP="compare:base:0.05", UNIT_SEEDS="2", EVAL_TEST_NUM="4"
    )
    assert create_run(fits.root, fits.queue, env).knobs["EVAL_STOP"] == "compare:base:0.05"


def test_the_baseline_a_run_was_checked_against_is_the_one_its_workers_read(tmp_path: Path) -> None:
    """The baseline's directory is resolved once, when the run is created: a worker or a report whose
    RUNS_ROOT differs (another node's environment) used to read $RUNS_ROOT/base there, another run
    or none at all, and stop cells against it."""
    runs, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    pool_env(make_run(runs / "base", [("s", "t")]), EVAL_TEST_NUM="4")
    run = make_run(runs / "r", [("s", "t")])
    pool_env(run, RUNS_ROOT=str(runs), EVAL_STOP="compare:base:0.05", UNIT_SEEDS="2", EVAL_TEST_NUM="4")
    rule = run_rule(load_manifest(run.root))
    assert rule.baseline_dir({"RUNS_ROOT": str(elsewhere)}) == (runs / "base").resolve()
    assert rule.baseline == "base" and rule.margin == 0.05
