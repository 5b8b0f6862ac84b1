"""compare_runs on a constructed pair whose flipped seeds are known."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results import ResultsError
from harness.results.compare import compare
from harness.results.load import load_run
from harness.results.stats import paired_diff_interval
from support.results_fixtures import new_run, record, write_records

REPO = Path(__file__).resolve().parents[2]
B_SUCCESS = {0, 1, 3, 4, 5, 7, 8}


def _pair(tmp_path: Path):
    a, b = new_run(tmp_path, "run_a"), new_run(tmp_path, "run_b")
    write_records(a, [record("table", "pick_cube", s, s < 6, s < 4, contract="aaaa") for s in range(11)])
    write_records(b, [record("table", "pick_cube", s, s in B_SUCCESS, contract="bbbb") for s in range(9)])
    write_records(b, [record("table", "pick_cube", 9, False, error="simulator hung", contract="bbbb")])
    for run, contract in ((a, "aaaa"), (b, "bbbb")):
        write_records(run, [record("table", "push_cube", s, s % 2 == 0, contract=contract) for s in range(6)])
    return a, b


def test_known_flips_and_mcnemar(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    comp = compare(load_run(a), load_run(b))
    assert [f.key[2] for f in comp.flips] == [2, 4, 5, 7, 8]
    assert all(f.video_a and f.video_a.is_file() and f.video_b and f.video_b.is_file() for f in comp.flips)
    pick, push = comp.cells
    assert (len(pick.pairs), pick.only_a, pick.only_b, pick.errored) == (9, 1, 0, 1)
    assert (pick.test("success").b, pick.test("success").c) == (1, 2)
    assert pick.test("success").p_value == pytest.approx(1.0)
    assert (pick.test("hard_success").b, pick.test("hard_success").c) == (1, 4)
    assert pick.test("hard_success").p_value == pytest.approx(0.375)
    assert pick.diff("success") == pytest.approx(7 / 9 - 6 / 9)
    assert push.diff("success") == 0 and push.test("success").p_value == 1.0
    assert len(comp.total.pairs) == 15
    assert comp.mean_diff("success") == pytest.approx((1 / 9 + 0) / 2)


def test_paired_difference_interval_per_task_and_pooled(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    comp = compare(load_run(a), load_run(b))
    pick, push = comp.cells
    # pick_cube SR, seeds 0-8: both 0,1,3,4,5; B only 7,8; A only 2; neither 6
    assert pick.diff_interval("success") == pytest.approx(paired_diff_interval(5, 2, 1, 1))
    lo, hi = pick.diff_interval("success")  # type: ignore[misc]
    assert lo < pick.diff("success") < hi  # type: ignore[operator]
    assert push.diff_interval("success") == pytest.approx(paired_diff_interval(3, 0, 0, 3))
    assert comp.total.diff_interval("success") == pytest.approx(paired_diff_interval(8, 2, 1, 4))


def test_no_common_trials_is_an_error(tmp_path: Path) -> None:
    a, b = new_run(tmp_path, "run_a"), new_run(tmp_path, "run_b")
    write_records(a, [record("table", "pick_cube", s, True) for s in range(3)])
    write_records(b, [record("table", "pick_cube", s, True) for s in range(3, 6)])
    with pytest.raises(ResultsError, match="share no"):
        compare(load_run(a), load_run(b))


def test_cli_text_json_html(tmp_path: Path) -> None:
    _pair(tmp_path)
    page, doc = tmp_path / "cmp.html", tmp_path / "cmp.json"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts/compare_runs.py"),
            "run_a",
            "run_b",
            "--html",
            str(page),
            "--json",
            str(doc),
        ],
        env={"RUNS_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "flipped seeds (5):" in done.stdout
        and "table/pick_cube seed 7: A failed, B hard success" in done.stdout
    )
    pooled = json.loads(doc.read_text())["pooled"]
    assert pooled["pairs"] == 15
    lo, hi = paired_diff_interval(8, 2, 1, 4)  # type: ignore[misc]
    assert (pooled["sr"]["diff_lo"], pooled["sr"]["diff_hi"]) == pytest.approx((lo, hi))
    assert pooled["sr"]["diff_interval"] == "Newcombe paired 95%"
    assert "ΔSR 95% CI" in done.stdout and "Δ 95% CI: Newcombe paired 95% interval" in done.stdout
    total_row = next(line for line in done.stdout.splitlines() if line.startswith("TOTAL "))
    assert f"[{100 * lo:+.1f}, {100 * hi:+.1f}]" in total_row
    hrefs = re.findall(r'href="([^"]+)"', page.read_text())
    assert len(hrefs) == 10 and all((page.parent / h).is_file() for h in hrefs)
