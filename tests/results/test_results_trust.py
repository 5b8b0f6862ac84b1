"""Issue 59 in the results tools: round trips per task in results.txt, report.html and status;
records from before these fields organize as before."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from harness.config.create import create_run
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.results.aggregate import latency_of
from harness.results.organize import Options, organize
from harness.results.status import collect
from harness.results.status_view import render
from support.results_fixtures import new_run, record, write_records

NOW = datetime.fromisoformat("2025-01-01T00:01:00+00:00").timestamp()


def timed(rec: dict[str, Any], calls: int, p50: float, p95: float) -> dict[str, Any]:
    return {**rec, "infer_calls": calls, "infer_p50_ms": p50, "infer_p95_ms": p95}


def test_latency_of_weights_p50_by_round_trips_and_takes_the_worst_p95() -> None:
    recs = [
        timed(record("s", "t", 0, True), 10, 5.0, 9.0),
        timed(record("s", "t", 1, True), 30, 7.0, 12.0),
        timed(record("s", "t", 2, False), 1, 50.0, 50.0),
        record("s", "t", 3, True),  # an old record: left out
    ]
    lat = latency_of(recs)
    assert (lat.episodes, lat.calls, lat.p50_ms, lat.p95_ms) == (3, 41, 7.0, 50.0)
    assert "41 round trips, p50 7.0 ms, p95 50.0 ms" in lat.text()
    assert latency_of([record("s", "t", 0, True)]).text() == "round trips not recorded"


def test_organize_shows_round_trips_per_task(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    write_records(run, [timed(record("table", "pick", s, s < 3), 4, 10.0 + s, 20.0 + s) for s in range(4)])
    write_records(run, [record("table", "push", s, s < 1) for s in range(2)])  # older records
    [out] = organize(Options(str(run.root), "m1", tmp_path / "out", "none"), lambda line: None)
    text = (out / "table" / "results.txt").read_text()
    block = text[text.index("policy round trips") :]
    pick = next(line for line in block.splitlines() if line.startswith("pick"))
    assert pick.split() == ["pick", "4", "16", "11.0", "23.0"]
    rows = {r["task"]: r for r in json.loads((out / "results.json").read_text())["rows"] if r["task"]}
    assert (rows["pick"]["infer_calls"], rows["pick"]["infer_p95_ms"]) == (16, 23.0)
    assert rows["push"]["infer_calls"] is None
    html = (out / "report.html").read_text()
    assert "<td>16</td><td>11.0</td><td>23.0</td>" in html and "not recorded" in html


def test_status_shows_round_trips_per_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    knobs = {"USE_EVAL_SEEDS": "0", "EVAL_TEST_NUM": "2", "UNIT_SEEDS": "2", "RUNS_ROOT": str(tmp_path)}
    for name, value in {**knobs, "BENCHMARK": "tests.support.fastbench:FastBench"}.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "queue.txt").write_text("table pick_cube\n")
    create_run(tmp_path / "run1", tmp_path / "queue.txt")
    run = RunDir(tmp_path / "run1")
    write_records(run, [timed(record("table", "pick_cube", s, True), 5, 3.0, 8.5) for s in range(2)])
    status = collect(run, Settings.from_env(os.environ), now=NOW)
    assert status.latency[("table", "pick_cube")].calls == 10
    console = Console(record=True, width=160)
    console.print(render(status))
    text = console.export_text()
    assert "policy round trips per task" in text and "8.5" in text
    assert "node fingerprints" in text and "unknown" in text


def test_fingerprint_groups_with_old_records_as_one_unknown_group(tmp_path: Path) -> None:
    from harness.episode import nodeprint

    run = new_run(tmp_path)
    ident = nodeprint.store(run.root, {"sim_side": {"cpu": {"model": "EPYC 9654"}}, "model_side": None})
    new = [{**record("table", "pick", s, True), "fingerprint": ident, "host": "n1"} for s in range(3)]
    write_records(run, new + [record("table", "pick", s, False) for s in range(3, 5)])
    [out] = organize(Options(str(run.root), "m1", tmp_path / "out", "none"), lambda line: None)
    groups = json.loads((out / "results.json").read_text())["node_groups"]
    assert [(g["id"], g["episodes"], g["hosts"]) for g in groups] == [
        (ident, 3, {"n1": 3}),
        ("unknown", 2, {"node1": 2}),
    ]
    text = (out / "results.txt").read_text()
    assert "node fingerprints" in text and "EPYC 9654" in text and "records from before fingerprints" in text
    assert "EPYC 9654" in (out / "report.html").read_text()


def test_invalid_episodes_are_counted_apart_and_named(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    reason = "success holds before the policy's first action (not a trial)"
    recs = [record("table", "pick", s, s < 2) for s in range(4)]
    recs.append({**record("table", "pick", 4, False), "invalid": reason})
    write_records(run, recs)
    [out] = organize(Options(str(run.root), "m1", tmp_path / "out", "none"), lambda line: None)
    doc = json.loads((out / "results.json").read_text())
    assert doc["totals"]["pooled_over_episodes"]["sr"]["n"] == 4  # the invalid one is no trial
    assert (doc["totals"]["errored"], doc["totals"]["invalid"]) == (0, 1)
    text = (out / "table" / "results.txt").read_text()
    assert f"pick seed 4: {reason}" in text and "invalid episodes (success held" in text
    assert 'class="ep inv"' in (out / "report.html").read_text()


def _mixed_run(tmp_path: Path) -> tuple[RunDir, str, str]:
    """Two node groups; the canary of the second (node n2) differs from the reference (node n1)."""
    import numpy as np

    from harness.episode import canary, nodeprint

    class Episode:
        action_dim = 1

        def __init__(self, drift: float) -> None:
            self.x, self.drift = np.zeros(1), drift

        def physics_state(self) -> np.ndarray:
            return self.x

        def apply(self, action: np.ndarray) -> None:
            self.x = self.x + action + self.drift

        def video_frame(self) -> np.ndarray:
            return np.zeros((4, 4, 3), np.uint8)

    run = new_run(tmp_path)
    ids = []
    for host, cpu, drift, seeds in (("n1", "EPYC 9654", 0.0, (0, 1)), ("n2", "Xeon 8480", 1e-6, (2, 3))):
        doc = {"sim_side": {"cpu": {"model": cpu}}, "model_side": None}
        ids.append(nodeprint.store(run.root, doc))
        actions = np.ones((3, 1), np.float32)
        canary.run_canary(run.root, Episode(drift), actions, "pick", 0, nodeprint.sim_id(doc))
        tagged = {"fingerprint": ids[-1], "host": host}
        write_records(run, [{**record("table", "pick", s, s % 2 == 0), **tagged} for s in seeds], writer=host)
    return run, ids[0], ids[1]


def test_organize_refuses_to_pool_groups_whose_canaries_differ(tmp_path: Path) -> None:
    import subprocess
    import sys

    run, good, odd = _mixed_run(tmp_path)
    from harness.results import ResultsError

    with pytest.raises(ResultsError) as refused:
        organize(Options(str(run.root), "m1", tmp_path / "out", "none"), lambda line: None)
    text = str(refused.value)
    assert f"{odd}: 2 episode(s) on n2 (2)" in text and "DIFFERS" in text and "first at step 1" in text
    assert f"{good}: 2 episode(s) on n1 (2); canary is the reference (" in text and "--allow-mixed" in text
    repo = Path(__file__).resolve().parents[2]
    cli = [sys.executable, str(repo / "scripts" / "organize_results.py"), str(run.root), "m1"]
    done = subprocess.run([*cli, "--out", str(tmp_path / "o2"), "--videos", "none"], capture_output=True,
                          text=True, cwd=repo, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "refusing to pool them" in done.stderr and odd in done.stderr
    logs: list[str] = []
    written = organize(Options(str(run.root), "m1", tmp_path / "out", "none", allow_mixed=True), logs.append)
    assert [p.name for p in written] == ["out", f"fingerprint-{good}", f"fingerprint-{odd}"]
    pooled = json.loads((tmp_path / "out" / "results.json").read_text())
    assert pooled["totals"]["pooled_over_episodes"]["sr"]["n"] == 4
    per_group = json.loads((written[2] / "results.json").read_text())
    assert per_group["totals"]["pooled_over_episodes"]["sr"]["n"] == 2
    assert any("pooled despite differing canaries" in line for line in logs)
    assert "DIFFERS" in (tmp_path / "out" / "results.txt").read_text()


def test_compare_runs_refuses_a_run_of_differing_canaries_unless_allowed(tmp_path: Path) -> None:
    import subprocess
    import sys

    run, _, odd = _mixed_run(tmp_path)
    repo = Path(__file__).resolve().parents[2]
    cli = [sys.executable, str(repo / "scripts" / "compare_runs.py"), str(run.root), str(run.root)]
    refused = subprocess.run(cli, capture_output=True, text=True, cwd=repo, timeout=120)
    assert refused.returncode == 2 and "refusing to pool them" in refused.stderr and odd in refused.stderr
    allowed = subprocess.run([*cli, "--allow-mixed"], capture_output=True, text=True, cwd=repo, timeout=120)
    assert allowed.returncode == 0, allowed.stderr
    assert f"node group {odd}, 2 episode(s) on n2 (2): canary DIFFERS" in allowed.stderr
