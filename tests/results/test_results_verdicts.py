"""compare_runs' per-task verdicts: exact McNemar per task, Holm-adjusted over the tasks, on pairs of
runs built so that the right verdicts are known."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.rundir import RunDir
from harness.results.compare import compare
from harness.results.load import load_run
from harness.results.stats import PairedTest
from harness.results.verdicts import task_verdicts
from support.results_fixtures import new_run, record, write_records

REPO = Path(__file__).resolve().parents[2]
SEEDS = range(20)


def _runs(tmp_path: Path, outcomes: dict[str, tuple[set[int], set[int]]]) -> tuple[RunDir, RunDir]:
    """Runs run_a and run_b: per task, the seeds A and B succeeded on (of 20)."""
    a, b = new_run(tmp_path, "run_a"), new_run(tmp_path, "run_b")
    for task, (wins_a, wins_b) in outcomes.items():
        write_records(
            a, [record("table", task, s, s in wins_a, contract="aaaa") for s in SEEDS], videos=False
        )
        write_records(
            b, [record("table", task, s, s in wins_b, contract="bbbb") for s in SEEDS], videos=False
        )
    return a, b


def _verdicts(runs: tuple[RunDir, RunDir]) -> dict[str, tuple[float, float, str]]:
    comp = compare(load_run(runs[0]), load_run(runs[1]))
    return {v.name: (v.test.p_value, v.p_holm, v.verdict) for v in comp.verdicts("success")}


def test_one_task_clearly_better_one_worse_the_others_unchanged(tmp_path: Path) -> None:
    half = set(range(0, 20, 2))
    runs = _runs(
        tmp_path,
        {
            "lift_peg": (set(), set(range(18))),  # B alone succeeds on 18 seeds
            "pick_cube": (half, half),  # the same outcomes
            "push_cube": (half | {1}, half | {3}),  # one flip each way
            "stack": (set(SEEDS), {0, 1}),  # A alone succeeds on 18 seeds
        },
    )
    got = _verdicts(runs)
    assert got["table/lift_peg"][2] == "better" and got["table/stack"][2] == "worse"
    assert got["table/pick_cube"][2] == got["table/push_cube"][2] == "no difference"
    assert got["table/lift_peg"][0] == pytest.approx(2 * 0.5**18)
    assert got["table/lift_peg"][1] == pytest.approx(4 * 2 * 0.5**18)  # Holm: the smallest p times 4


def test_unadjusted_p_passes_but_holm_does_not(tmp_path: Path) -> None:
    runs = _runs(
        tmp_path,
        {
            "lift_peg": (set(), set(range(6))),  # 6 discordant, all B: exact p = 2 / 2**6 = 0.031
            "pick_cube": (set(range(10)), set(range(10))),
            "push_cube": ({0, 1}, {0, 1}),
        },
    )
    p, p_holm, verdict = _verdicts(runs)["table/lift_peg"]
    assert p == pytest.approx(0.03125) and p < 0.05
    assert p_holm == pytest.approx(3 * 0.03125) and p_holm > 0.05
    assert verdict == "no difference"


def test_holm_steps_down_and_alpha_is_checked() -> None:
    tests = [("a", PairedTest(0, 12)), ("b", PairedTest(8, 0)), ("c", PairedTest(1, 9))]
    p_a, p_b, p_c = (t.p_value for _, t in tests)  # 0.0005 < 0.008 < 0.021
    verdicts = task_verdicts(tests, alpha=0.05)
    assert [v.verdict for v in verdicts] == ["better", "worse", "better"]
    assert [v.p_holm for v in verdicts] == pytest.approx([3 * p_a, max(3 * p_a, 2 * p_b), max(2 * p_b, p_c)])
    assert task_verdicts([], 0.05) == []
    with pytest.raises(ValueError, match="alpha"):
        task_verdicts(tests, alpha=1.5)


def test_cli_prints_and_writes_the_verdicts(tmp_path: Path) -> None:
    _runs(tmp_path, {"lift_peg": (set(), set(range(18))), "pick_cube": ({1, 2}, {1, 2})})
    doc = tmp_path / "cmp.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/compare_runs.py"), "run_a", "run_b", "--json", str(doc),
         "--alpha", "0.01"],
        env={"RUNS_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "per-task verdicts at α = 0.01" in done.stdout
    row = next(
        line for line in done.stdout.splitlines() if line.startswith("table/lift_peg") and "better" in line
    )
    assert row.split().count("better") == 2  # SR and HSR (a success is a hard one here)
    tasks = {t["name"]: t for t in json.loads(doc.read_text())["tasks"]}
    assert tasks["table/lift_peg"]["sr"]["verdict"] == "better"
    assert tasks["table/pick_cube"]["sr"]["verdict"] == "no difference"
    assert tasks["table/lift_peg"]["sr"]["p_holm"] == pytest.approx(min(1, 2 * 2 * 0.5**18))
    assert json.loads(doc.read_text())["verdicts"] == {
        "alpha": 0.01,
        "test": "exact McNemar",
        "correction": "holm",
    }
