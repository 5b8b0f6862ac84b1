"""Task names that are whole sentences (LIBERO's instructions: spaces, quotes, slashes) through the
queue file, the lease keys, the result paths, the seed banks and the report, intact; the real
worker, model server and sim client over the fast benchmark (no simulator needed)."""

from __future__ import annotations

import html
import json
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from harness.config.rundir import Cell, QueueFileError, RunDir, read_queue
from harness.config.seedbank import bank_file
from harness.episode.records import read_tree
from harness.pathnames import path_part
from harness.queue.units import KEY_MAX, Unit
from harness.results.organize import Options, organize
from support.poolkit import REPO, SLEEP_POLICY, debug_worker

LIBERO_TASK = "pick up the alphabet soup and place it in the basket"
ODD_TASKS = [
    LIBERO_TASK,
    "put the 'red' mug / the \"blue\" one on the plate",  # quotes and a slash
    "50% of the .. butter",  # a percent sign and dots
    ".hidden start",
]


def test_the_task_is_the_rest_of_the_line(tmp_path: Path) -> None:
    queue = tmp_path / "queue.txt"
    queue.write_text(
        "# LIBERO units\n"
        f"libero {LIBERO_TASK}\n"
        "libero   put the 'red' mug / the \"blue\" one   on the plate  # its comment\n"
        "table PickCube\n"
    )
    assert read_queue(queue) == [
        Cell("libero", LIBERO_TASK),
        Cell("libero", "put the 'red' mug / the \"blue\" one   on the plate"),  # inner spaces kept
        Cell("table", "PickCube"),
    ]


def test_a_line_without_a_task_is_one_error_naming_the_line(tmp_path: Path) -> None:
    queue = tmp_path / "queue.txt"
    queue.write_text("table PickCube\nlibero\n")
    expected = r"queue.txt:2: expected '<scene> <task>', got 'libero' \(no task\)"
    with pytest.raises(QueueFileError, match=expected):
        read_queue(queue)


@pytest.mark.parametrize("name", [*ODD_TASKS, "a/b", "a-b", "a%2Fb", ".", "..", "naïve ☃"])
def test_path_part_is_one_reversible_path_component(name: str) -> None:
    part = path_part(name)
    assert "/" not in part and part not in (".", "..") and not part.startswith(".")
    assert urllib.parse.unquote(part) == name


def test_plain_names_keep_their_paths_and_keys() -> None:
    assert path_part("PickCube") == "PickCube" and path_part("table_clean") == "table_clean"
    assert Unit("table", "PickCube", "table_clean", 0, 10, ()).key == "table__PickCube__0-10"


def test_unit_keys_of_similar_names_differ_and_stay_short() -> None:
    keys = {Unit("libero", task, "c", 0, 5, ()).key for task in ["a/b", "a-b", "a%2Fb", "a b", "a_b"]}
    assert len(keys) == 5 and not any("/" in key for key in keys)
    long_task = "pick up " + "the very long sentence " * 20
    long_keys = {Unit("libero", long_task + end, "c", 0, 5, ()).key for end in ("x", "y")}
    assert len(long_keys) == 2 and all(len(key.encode()) <= KEY_MAX for key in long_keys)


def test_seed_bank_files_use_the_same_encoding(tmp_path: Path) -> None:
    path = bank_file(tmp_path, Cell("libero", ODD_TASKS[1]), "libero_object")
    assert path.parent.parent == tmp_path and path.name == "libero_libero_object.txt"
    assert urllib.parse.unquote(path.parent.name) == ODD_TASKS[1]


@pytest.mark.sim
def test_sentence_task_names_round_trip_through_a_real_run_and_its_report(tmp_path: Path) -> None:
    queue_text = "".join(f"libero {task}\n" for task in ODD_TASKS)
    argv, env = debug_worker(
        tmp_path, "names", queue_text,
        BENCHMARK="tests.support.fastbench:FastBench", POLICY=SLEEP_POLICY, USE_EVAL_SEEDS="0",
        EVAL_TEST_NUM="2", FASTBENCH_STEPS="2", FASTBENCH_STEP_MS="1", RECORD_VIDEO="1",
    )  # fmt: skip
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = RunDir(tmp_path / "names")
    records = read_tree(run.results).records
    assert sorted({r["task"] for r in records.values()}) == sorted(ODD_TASKS) and len(records) == 8
    # one directory per task under eval_result, named reversibly
    assert sorted(urllib.parse.unquote(p.name) for p in run.results.iterdir()) == sorted(ODD_TASKS)
    leases = [p.name for p in run.leases.iterdir() if p.is_dir()]
    assert sorted({urllib.parse.unquote(key.split("__")[1]) for key in leases}) == sorted(ODD_TASKS)
    # the report: every name in the tables, every video link resolves to its file
    out = tmp_path / "report"
    organize(Options(str(run.root), "sleep", out, "link"), lambda _: None)
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert sorted(row["task"] for row in rows if row["level"] == "task") == sorted(ODD_TASKS)
    text = (out / "libero" / "results.txt").read_text()
    assert all(task in text for task in ODD_TASKS)
    page = (out / "report.html").read_text()
    hrefs = [part.split('"', 1)[0] for part in page.split('href="')[1:]]
    videos = [h for h in hrefs if h.endswith(".mp4")]
    assert len(videos) == 8
    for href in videos:
        assert (out / urllib.parse.unquote(html.unescape(href))).is_file(), href
