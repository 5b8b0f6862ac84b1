"""The learning curve of a watched series (harness.launch.curve, seriesout): rates and intervals per
task and in total against the step, and each checkpoint's paired verdict against the best earlier
one, equal to what compare_runs computes for the same pair. Real run dirs (created as new_run
creates them), hand-made records, so the outcomes differ between checkpoints."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from harness.config.manifest import contract_hash, load_manifest
from harness.config.rundir import RunDir
from harness.launch.ckptscan import run_name
from harness.launch.seriesout import write_curve
from harness.results.compare import compare
from harness.results.load import load_run
from harness.results.verdicts import task_verdicts
from support.poolkit import make_run, pool_env
from support.results_fixtures import record, write_records

OUTCOMES = {  # step: successes of seeds 0..7 on each task
    1000: {"t1": [1, 1, 0, 0, 0, 0, 0, 0], "t2": [0, 0, 0, 0, 0, 0, 0, 0]},
    2000: {"t1": [1, 1, 1, 1, 1, 1, 1, 1], "t2": [1, 1, 1, 1, 1, 1, 1, 0]},
    3000: {"t1": [1, 1, 1, 1, 1, 1, 1, 1], "t2": [1, 1, 1, 0, 1, 1, 1, 0]},
}


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    monkeypatch.setenv("RUNS_ROOT", str(root))
    for step, tasks in OUTCOMES.items():
        run = make_run(root / run_name("tr", step), [("s1", "t1"), ("s1", "t2")])
        pool_env(run, EVAL_TEST_NUM="8")  # creates the run under the fast pool's knobs
        digest = contract_hash(load_manifest(run.root))
        recs = [
            record("s1", task, seed, bool(ok), contract=digest, bench_config="clean")
            for task, oks in tasks.items()
            for seed, ok in enumerate(oks)
        ]
        write_records(run, recs, videos=False)
    return root


def test_curve_has_rates_with_intervals_and_the_paired_verdict_of_compare_runs(
    runs: Path, tmp_path: Path
) -> None:
    points = write_curve("tr", tmp_path / "out")
    assert [(p.step, p.state) for p in points] == [(1000, "done"), (2000, "done"), (3000, "done")]
    assert points[0].verdict is None
    assert points[0].summary.total.pooled_sr.text() == " 12.5% [ 3.5– 36.0] 2/16"
    v2, v3 = points[1].verdict, points[2].verdict
    assert (v2.best_step, v2.word) == (1000, "better")  # 13 flips its way, none the other
    assert (v3.best_step, v3.word) == (2000, "no clear difference")  # one seed lost
    for point, best in ((points[1], 1000), (points[2], 2000)):
        comp = compare(load_run(series_run(runs, best)), load_run(series_run(runs, point.step)))
        assert (point.verdict.lo, point.verdict.hi) == comp.total.diff_interval("success")
        assert point.verdict.p_value == comp.total.test("success").p_value

    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "curve.csv").read_text())))
    assert [(r["step"], r["task"]) for r in rows] == [
        (str(s), t) for s in OUTCOMES for t in ("s1/t1", "s1/t2", "TOTAL")
    ]
    by = {(r["step"], r["task"]): r for r in rows}
    comp = compare(load_run(series_run(runs, 1000)), load_run(series_run(runs, 2000)))
    holm = {v.name: v for v in task_verdicts([(c.name, c.test("success")) for c in comp.cells])}
    for task in ("s1/t1", "s1/t2"):  # per task: compare_runs' test, Holm-adjusted over the tasks
        row = by[("2000", task)]
        assert row["verdict"] == holm[task].verdict == "better" and row["against_step"] == "1000"
        assert float(row["p_holm"]) == pytest.approx(holm[task].p_holm)
        assert float(row["mcnemar_p"]) == pytest.approx(holm[task].test.p_value)
    assert by[("1000", "s1/t1")]["verdict"] == "" and by[("2000", "TOTAL")]["p_holm"] == ""
    total_3000 = rows[-1]
    assert (total_3000["sr_k"], total_3000["sr_n"], total_3000["interval"]) == ("14", "16", "Wilson 95%")
    assert float(total_3000["sr_lo"]) < 14 / 16 < float(total_3000["sr_hi"])
    assert total_3000["verdict"] == "no clear difference" and total_3000["against_step"] == "2000"
    doc = json.loads((tmp_path / "out" / "curve.json").read_text())
    assert doc["points"][1]["tasks"]["s1/t2"]["sr"]["k"] == 7
    assert doc["points"][1]["verdict"]["diff_interval"] == "Newcombe paired 95%"
    page = (tmp_path / "out" / "curve.html").read_text()
    assert "better vs step 1000" in page and (tmp_path / "out" / "curve.png").stat().st_size > 10_000


def series_run(runs: Path, step: int) -> RunDir:
    return RunDir(runs / run_name("tr", step))
