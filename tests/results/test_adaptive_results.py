"""organize_results and status on an adaptive run (EVAL_STOP=precision): every rate carries the
anytime-valid interval, never Wilson; each cell shows its state; a decided cell counts its decided
prefix and lists the episodes that ran after it; the episodes saved against the cap are stated."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rich.console import Console

from harness.config.create import create_run
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.results.organize import Options, organize
from harness.results.status import collect
from harness.results.status_view import render
from support.results_fixtures import record, write_records


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunDir:
    knobs = {"USE_EVAL_SEEDS": "0", "EVAL_TEST_NUM": "40", "UNIT_SEEDS": "2", "EVAL_STOP": "precision:0.3",
             "RUNS_ROOT": str(tmp_path), "BENCHMARK": "tests.support.fastbench:FastBench"}  # fmt: skip
    for name, value in knobs.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "queue.txt").write_text("table a\ntable b\n")
    create_run(tmp_path / "run1", tmp_path / "queue.txt")
    run = RunDir(tmp_path / "run1")
    # cell a decides at n=16 (precision 0.3 on this pattern); seeds 16..19 were running then and finished
    write_records(run, [record("table", "a", s, s % 4 != 0, contract="c1") for s in range(20)], videos=False)
    write_records(run, [record("table", "b", s, s % 2 == 0, contract="c1") for s in range(6)], videos=False)
    return run


def test_the_tables_count_the_decided_prefix_with_anytime_intervals(run: RunDir, tmp_path: Path) -> None:
    logs: list[str] = []
    [out] = organize(Options(str(run.root), "m1", tmp_path / "out", "none"), logs.append)
    text = (out / "results.txt").read_text() + (out / "table" / "results.txt").read_text()
    assert "Wilson" not in text and "anytime-valid 95% interval" in text
    assert "decided: precise at n=16 (+4 after)" in text and "running" in text
    assert "episodes ran 26 of the cap 80, saved 20; ran after a decision (not counted): 4" in text
    doc = json.loads((out / "results.json").read_text())
    assert doc["interval"] == "anytime-valid 95%"
    assert "(no interval: an adaptive run)" in text  # the mean over tasks: a fixed-n interval does not hold
    assert (
        doc["totals"]["mean_over_tasks"]["sr_lo"] is None
        and doc["totals"]["mean_over_tasks"]["interval"] is None
    )
    assert doc["adaptive"] == {"rule": "precision:0.3", "cells": {"decided: precise": 1, "running": 1},
                               "cap": 80, "ran": 26, "saved": 20, "ran_after_decision": 4}  # fmt: skip
    row = next(r for r in doc["rows"] if r["task"] == "a")
    assert (row["n"], row["sr_k"], row["state"], row["ran_after_decision"]) == (16, 12, "decided", 4)
    page = (out / "report.html").read_text()
    assert "anytime-valid 95% interval" in page and "Wilson" not in page and "saved 20" in page
    assert any("adaptive run (EVAL_STOP=precision:0.3)" in line for line in logs)


def test_status_shows_cell_states_and_skips_the_decided_cells_units(run: RunDir) -> None:
    status = collect(run, Settings.from_env(os.environ))
    assert status.sr.anytime and status.sr.n == 16 + 6
    # a's pending units past its stop point (index 16; the hand-made records mark no unit done)
    assert status.counts["skipped"] == 12 and status.skipped == 24
    console = Console(record=True, width=160)
    console.print(render(status))
    shown = console.export_text()
    assert "decided: precise at n=16" in shown and "skipped (cell decided) 12" in shown
    assert "(anytime-valid 95% intervals)" in shown and "Wilson" not in shown
