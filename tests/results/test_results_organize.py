"""organize_results: dedup, Wilson intervals, errored apart, mixed contracts refused, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results import ResultsError
from harness.results.organize import Options, organize
from harness.results.stats import PairedTest, Rate, wilson
from support.results_fixtures import append_raw, dumps, new_run, record, write_records

REPO = Path(__file__).resolve().parents[2]


def test_wilson_known_values() -> None:
    assert wilson(17, 20) == pytest.approx((0.6396, 0.9476), abs=1e-4)
    assert wilson(8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert Rate(17, 20).text() == " 85.0% [64.0– 94.8] 17/20"
    assert Rate(0, 0).text() == "—  0/0" and Rate(0, 0).value is None
    with pytest.raises(ValueError):
        wilson(3, 0)


def test_exact_mcnemar() -> None:
    assert PairedTest(0, 0).p_value == 1.0
    assert PairedTest(5, 0).p_value == pytest.approx(0.0625)  # 2 * 0.5**5
    assert PairedTest(6, 1).p_value == pytest.approx(0.125)


def _populate(tmp_path: Path):
    run = new_run(tmp_path)
    pick = [record("table", "pick_cube", s, s < 17, s < 14) for s in range(20)]
    push = [record("table", "push_cube", s, s < 8) for s in range(10)]
    push += [record("table", "push_cube", s, False, error="sim crashed") for s in (10, 11)]
    other = [record("shelf", "stack", s, s % 2 == 0) for s in range(4)]
    write_records(run, pick + push + other)
    # A duplicate: seed 17 failed first (above); a later retry by another writer succeeded (hard).
    write_records(
        run, [record("table", "pick_cube", 17, True, True, finished_at="2025-01-02T00:00:00+00:00")], "w1"
    )
    # An older duplicate of seed 0 that failed must lose against the later success.
    write_records(
        run, [record("table", "pick_cube", 0, False, finished_at="2024-12-31T00:00:00+00:00")], "w2"
    )
    # A writer killed mid-line.
    append_raw(run, "pick_cube", "table_clean", dumps(record("table", "pick_cube", 99, True))[:40], "w1")
    return run


def test_organize_outputs(tmp_path: Path) -> None:
    run = _populate(tmp_path)
    logs: list[str] = []
    [out] = organize(Options(str(run.root), "m1", tmp_path / "out", "link"), logs.append)
    assert any("torn line" in line for line in logs)
    assert (out / "table" / "pick_cube" / "seed17.mp4").is_symlink()
    assert (out / "table" / "pick_cube" / "seed17.mp4").read_bytes().endswith(b"seed 17")
    assert not (out / "table" / "push_cube" / "seed99.mp4").exists()
    scene_txt = (out / "table" / "results.txt").read_text()
    assert "90.0% [69.9– 97.2] 18/20" in scene_txt  # 17 + the retried seed 17
    assert "75.0% [53.1– 88.8] 15/20" in scene_txt  # hard: 14 + seed 17
    push_line = next(line for line in scene_txt.splitlines() if line.startswith("push_cube"))
    assert "8/10" in push_line and push_line.rstrip().endswith("2")  # errored apart, not failures
    total_txt = (out / "results.txt").read_text()
    assert "TOTAL mean over tasks" in total_txt and "TOTAL pooled over episodes" in total_txt
    assert "28/34" in total_txt  # pooled SR: 18 + 8 + 2 of 20 + 10 + 4
    doc = json.loads((out / "results.json").read_text())
    assert doc["totals"]["mean_over_tasks"]["sr"] == pytest.approx((0.9 + 0.8 + 0.5) / 3)
    assert doc["totals"]["pooled_over_episodes"]["sr"]["n"] == 34
    assert doc["totals"]["errored"] == 2
    assert any("torn" in w for w in doc["warnings"])
    csv_text = (out / "results.csv").read_text().splitlines()
    assert csv_text[0].startswith("level,scene,task") and len(csv_text) == 1 + 3 + 2 + 1


def test_copy_mode_and_reorganize(tmp_path: Path) -> None:
    run = _populate(tmp_path)
    out = tmp_path / "out"
    organize(Options(str(run.root), "m1", out, "link"), lambda _: None)
    organize(Options(str(run.root), "m1", out, "copy"), lambda _: None)
    video = out / "shelf" / "stack" / "seed2.mp4"
    assert video.is_file() and not video.is_symlink()


def test_mixed_contracts_refused_then_split(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    write_records(run, [record("table", "pick_cube", s, True, contract="aaaa1111") for s in range(3)])
    write_records(run, [record("table", "pick_cube", s, False, contract="bbbb2222") for s in range(3, 8)])
    with pytest.raises(ResultsError) as err:
        organize(Options(str(run.root), "m1", tmp_path / "out"), lambda _: None)
    assert "aaaa1111: 3 record(s)" in str(err.value) and "bbbb2222: 5 record(s)" in str(err.value)
    outs = organize(Options(str(run.root), "m1", tmp_path / "out", split_by_contract=True), lambda _: None)
    assert [p.name for p in outs] == ["contract-aaaa1111", "contract-bbbb2222"]
    assert "3/3" in (outs[0] / "results.txt").read_text()


def test_missing_and_empty_runs_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="not found"):
        organize(Options("nope", "m1", runs_root=str(tmp_path)), lambda _: None)
    run = new_run(tmp_path)
    with pytest.raises(ResultsError, match="no episode records"):
        organize(Options("run1", "m1", runs_root=str(tmp_path)), lambda _: None)
    append_raw(run, "pick_cube", "table_clean", '{"task": "pick_cu')
    with pytest.raises(ResultsError, match="no readable episode record"):
        organize(Options("run1", "m1", runs_root=str(tmp_path)), lambda _: None)
    assert not (tmp_path / "m1" / "results.txt").exists()


def test_refuses_to_write_into_a_run_dir(tmp_path: Path) -> None:
    run = _populate(tmp_path)
    with pytest.raises(ResultsError, match="is a run dir"):
        organize(Options("run1", "run1", runs_root=str(tmp_path)), lambda _: None)
    assert not (run.root / "results.txt").exists()


def test_cli_by_run_name(tmp_path: Path) -> None:
    _populate(tmp_path)
    env = {"RUNS_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/organize_results.py"), "run1", "m1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "m1" / "report.html").is_file() and "videos (link)" in done.stderr
    bad = subprocess.run(
        [sys.executable, str(REPO / "scripts/organize_results.py"), "missing", "m1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "run 'missing' not found" in bad.stderr


def test_cells_of_none_and_all_successes_organize_and_chart(tmp_path: Path) -> None:
    """0/3 and 10/10 cells: statsmodels' Wilson bounds miss the estimate by one ulp there (5.6e-17,
    0.9999999999999999), which made the chart's error bars negative and organize fail."""
    run = new_run(tmp_path)
    records = [record("table", "pick_cube", s, False) for s in range(3)]
    records += [record("table", "push_cube", s, True) for s in range(10)]
    write_records(run, records)
    [out] = organize(Options(str(run.root), "m1", tmp_path / "out"), lambda _: None)
    assert (out / "results.txt").is_file() and list(out.glob("*.png"))
    for k, n in [(0, 3), (0, 7), (10, 10), (3, 3)]:
        lo, hi = wilson(k, n)
        assert 0 <= lo <= k / n <= hi <= 1


def test_video_warnings_only_for_videos_records_name(tmp_path: Path) -> None:
    """RECORD_VIDEO=0 records name no video: no warning; a record naming a file that is gone: one."""
    run = new_run(tmp_path)
    off = [{**record("table", "pick_cube", seed, True), "video": None} for seed in range(3)]
    write_records(run, off, videos=False)
    logs: list[str] = []
    [out] = organize(Options(str(run.root), "m1", tmp_path / "off", "link"), logs.append)
    assert not any(line.startswith("warning") for line in logs), logs
    assert json.loads((out / "results.json").read_text())["warnings"] == []
    write_records(run, [record("table", "pick_cube", 7, True)], videos=False)  # names seed7.mp4, absent
    [out] = organize(Options(str(run.root), "m1", tmp_path / "named", "link"), logs.append)
    assert json.loads((out / "results.json").read_text())["warnings"] == [
        "1 episode(s) lack the video file their record names"
    ]
