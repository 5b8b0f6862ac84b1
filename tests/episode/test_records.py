"""Episode records are validated on read: a bad record is reported with its file:line and a reason,
never replaces a good one and is never counted; a torn last line is still ignored quietly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.create import create_run
from harness.config.manifest import Manifest
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.records import append_record, read_tree
from harness.results.aggregate import summarize
from harness.results.organize import Options, organize
from harness.results.stats import Rate
from harness.results.status import collect
from support.results_fixtures import append_line, append_raw, new_run, record, write_records

REPO = Path(__file__).resolve().parents[2]
TC = "table_clean"
KEY0 = ("pick_cube", TC, 0)
SR = Rate(3, 6).text()  # seeds 3, 4, 5 of 0..5 succeed


def _six(run: RunDir) -> None:
    """pick_cube seeds 0..5, seeds 3, 4 and 5 successes: SR 3/6."""
    write_records(run, [record("table", "pick_cube", s, s >= 3) for s in range(6)])


def _line(literals: dict[str, str] | None = None, drop: str | None = None) -> str:
    """A record of pick_cube seed 0 that succeeded later than the good one, as one JSON line, with some
    fields replaced by raw JSON text (`1e999` cannot be written by json.dumps) or dropped."""
    rec = record("table", "pick_cube", 0, True, finished_at="2025-06-01T00:00:00+00:00")
    for name in literals or {}:
        rec[name] = f"@@{name}@@"
    if drop:
        del rec[drop]
    text = json.dumps(rec, sort_keys=True)
    for name, literal in (literals or {}).items():
        text = text.replace(f'"@@{name}@@"', literal)
    return text


def _sr(run: RunDir) -> str:
    found = read_tree(run.results)
    return summarize(list(found.records.values()), "c").total.pooled_sr.text()


def _named(found_bad_lines: list[str], where: str) -> str:
    """The bad_lines entry of `where` (file:line), which must give a reason after it."""
    [entry] = [line for line in found_bad_lines if line.startswith(where + ": ")]
    assert len(entry) > len(where) + 2
    return entry


def test_float_seed_never_replaces_a_good_record(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    _six(run)
    where = append_line(run, "pick_cube", TC, _line({"seed": "0.5"}))
    found = read_tree(run.results)
    assert found.records[KEY0]["success"] is False and len(found.records) == 6
    assert "seed" in _named(found.bad_lines, where) and found.torn_lines == []
    logs: list[str] = []
    [out] = organize(Options(str(run.root), "m1", tmp_path / "out", "none"), logs.append)
    line = next(x for x in (out / "table" / "results.txt").read_text().splitlines() if "pick_cube" in x)
    assert SR in line
    assert any(x.startswith("warning:") and where in x and "seed" in x for x in logs), logs
    assert any(where in w for w in json.loads((out / "results.json").read_text())["warnings"])


@pytest.mark.parametrize(
    ("literals", "drop", "field"),
    [
        ({"seed": "1e999"}, None, "seed"),  # json reads it as inf: int(inf) raised OverflowError
        ({"task": '["pick_cube"]'}, None, "task"),  # a list in the key: unhashable
        ({"success": '"yes"'}, None, "success"),  # truthy, counted as a success
        (None, "success", "success"),
        (None, "error", "error"),  # no error field read as a trial
        (None, "finished_at", "finished_at"),
        (None, "scene", "scene"),
    ],
    ids=["seed-1e999", "task-list", "success-yes", "no-success", "no-error", "no-finished_at", "no-scene"],
)
def test_bad_record_reported_and_not_counted(
    tmp_path: Path, literals: dict[str, str] | None, drop: str | None, field: str
) -> None:
    run = new_run(tmp_path)
    _six(run)
    where = append_line(run, "pick_cube", TC, _line(literals, drop))
    write_records(run, [record("table", "pick_cube", 5, True)], "w1")  # a good line after it, elsewhere
    found = read_tree(run.results)
    assert field in _named(found.bad_lines, where)
    assert found.records[KEY0]["success"] is False and len(found.records) == 6
    assert _sr(run) == SR


@pytest.mark.parametrize(
    "literals",
    [
        {"seed": "true"}, {"seed": "-1"}, {"seed": '"0"'}, {"seed": "0.0"}, {"seed": "1e2"},
        {"task": '""'}, {"task_config": "7"}, {"scene": "null"},
        {"hard_success": "1"}, {"error": "5"}, {"error": '""'}, {"steps": "-1"}, {"steps": "2.5"},
        {"steps": '"100"'}, {"wall_s": "NaN"}, {"sim_s": "-0.5"}, {"model_s": "Infinity"},
        {"wall_s": "true"}, {"finished_at": "12"}, {"finished_at": '""'}, {"policy": "[]"},
        {"contract": "{}"}, {"video": "3"}, {"collision": "1"},
        {"success": "false", "hard_success": "true"},  # a hard success is a success without collision
        {"error": '"sim crashed"'},  # an errored episode cannot be a success (this one says success: true)
    ],
)  # fmt: skip
def test_every_field_is_checked(tmp_path: Path, literals: dict[str, str]) -> None:
    run = new_run(tmp_path)
    _six(run)
    where = append_line(run, "pick_cube", TC, _line(literals))
    found = read_tree(run.results)
    _named(found.bad_lines, where)
    assert found.records[KEY0]["success"] is False and _sr(run) == SR
    # What the writers really write passes: null contract/video/collision, a collision text, int times.
    good = {"contract": "null", "video": "null", "collision": '"panda_hand ~ table impulse=0.4"'}
    append_line(run, "pick_cube", TC, _line(good | {"wall_s": "3", "steps": "0", "seed": "6"}))
    assert _sr(run) == Rate(4, 7).text() and len(read_tree(run.results).bad_lines) == 1


def test_torn_last_line_stays_quiet(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    _six(run)
    path = append_raw(run, "pick_cube", TC, _line({"seed": "1e999"}))  # no newline: a writer died
    found = read_tree(run.results)
    assert found.torn_lines == [f"{path}:7"] and found.bad_lines == [] and _sr(run) == SR


def test_writer_refuses_a_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "_metrics.w0.jsonl"
    with pytest.raises(ValueError, match="seed"):
        append_record(path, {**record("table", "pick_cube", 0, True), "seed": 0.5})
    with pytest.raises(ValueError, match="success"):
        append_record(path, {**record("table", "pick_cube", 0, True), "success": "yes"})
    assert not path.exists() or path.read_bytes() == b""


BAD = {
    "seed 0.5": ({"seed": "0.5"}, None),
    "seed 1e999": ({"seed": "1e999"}, None),
    "task list": ({"task": '["pick_cube"]'}, None),
    "no success": (None, "success"),
    "success yes": ({"success": '"yes"'}, None),
}


@pytest.fixture
def planned_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RunDir, Manifest, list[str]]:
    """A run planned from run.yaml (pick_cube seeds 0..5) whose records hold the five bad lines."""
    for name, value in {
        "USE_EVAL_SEEDS": "0",
        "EVAL_TEST_NUM": "6",
        "RUNS_ROOT": str(tmp_path),
        "BENCHMARK": "tests.support.fastbench:FastBench",
    }.items():
        monkeypatch.setenv(name, value)
    queue = tmp_path / "queue.txt"
    queue.write_text("table pick_cube\n")
    manifest = create_run(tmp_path / "run1", queue)
    run = RunDir(tmp_path / "run1")
    _six(run)
    wheres = [append_line(run, "pick_cube", TC, _line(lit, drop)) for lit, drop in BAD.values()]
    write_records(run, [record("table", "pick_cube", 4, True)])  # a good last line
    return run, manifest, wheres


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)


def test_organize_and_status_cli_warn_and_count_only_good_records(
    planned_run: tuple[RunDir, Manifest, list[str]], tmp_path: Path
) -> None:
    run, _, wheres = planned_run
    out = tmp_path / "out"
    done = _cli(str(REPO / "scripts/organize_results.py"), str(run.root), "m1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    warned = [x for x in done.stderr.splitlines() if x.startswith("warning:")]
    assert all(any(w in x for x in warned) for w in wheres), done.stderr
    [line] = [x for x in (out / "table" / "results.txt").read_text().splitlines() if "pick_cube" in x]
    assert SR in line and line.rstrip().endswith("0")  # 3/6, nothing errored
    assert json.loads((out / "results.json").read_text())["totals"]["pooled_over_episodes"]["sr"]["n"] == 6

    shown = _cli(str(REPO / "scripts/status.py"), str(run.root))
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stdout + shown.stderr
    assert all(w in shown.stdout for w in wheres), shown.stdout
    assert "episodes: 6 of 6 done" in shown.stdout and f"SR {SR.strip()}" in shown.stdout


def test_compare_and_progress_warn_without_traceback(
    planned_run: tuple[RunDir, Manifest, list[str]], tmp_path: Path
) -> None:
    run, manifest, wheres = planned_run
    other = new_run(tmp_path, "run2")
    write_records(other, [record("table", "pick_cube", s, s >= 1) for s in range(6)])
    compared = _cli(str(REPO / "scripts/compare_runs.py"), str(run.root), str(other.root))
    assert compared.returncode == 0, compared.stderr
    assert "Traceback" not in compared.stdout + compared.stderr
    assert all(w in compared.stderr for w in wheres), compared.stderr
    status = collect(run, Settings.from_env(os.environ))
    assert (status.done, status.sr.k, status.sr.n) == (6, 3, 6)
    assert all(any(w in x for x in status.warnings) for w in wheres)
    from harness.launch.localpool import progress_line
    from harness.launch.progress import progress, results_table

    assert "episodes 6/6, 0 errored | SR so far " + SR in progress_line(run, Settings.from_env(os.environ))
    assert progress(run, manifest).done == 6
    assert SR in results_table([("m1", run, manifest)], "model")
