"""Which record of a seed counts (issue 11, item 8): independent of node clocks and of read order."""

from __future__ import annotations

import itertools
from pathlib import Path

from harness.episode.records import append_record, read_tree
from support.results_fixtures import record


def _write(root: Path, writer: str, rec: dict) -> None:
    append_record(root / f"_metrics.{writer}.jsonl", {**rec, "worker": writer})


def test_a_success_beats_a_later_errored_record_from_a_node_whose_clock_runs_ahead(tmp_path: Path) -> None:
    success = record("s", "t", 0, True, finished_at="2026-12-01T10:00:00+00:00")
    errored = record("s", "t", 0, False, error="stalled", finished_at="2026-12-01T11:30:00+00:00")
    _write(tmp_path, "fast-clock", errored)  # written first, its clock an hour and a half ahead
    _write(tmp_path, "honest", success)
    kept = read_tree(tmp_path).records[("t", "s_clean", 0)]
    assert kept["error"] is None and kept["worker"] == "honest"


def test_the_kept_record_does_not_depend_on_the_order_the_files_are_read(tmp_path: Path) -> None:
    recs = [
        ("w1", record("s", "t", 0, False, error="boom", finished_at="2026-12-01T10:00:01+00:00")),
        ("w1", record("s", "t", 0, False, error="boom again", finished_at="2026-12-01T10:00:05+00:00")),
        ("w2", record("s", "t", 0, False, error="killed", finished_at="2026-12-01T09:00:00+00:00")),
        ("w3", record("s", "t", 0, True, finished_at="2026-12-01T08:00:00+00:00")),
        ("w0", record("s", "t", 0, False, finished_at="2026-12-01T12:00:00+00:00")),
    ]
    kept = set()
    for order in itertools.permutations(recs):
        root = tmp_path / str(len(kept)) / "_".join(w for w, _ in order)
        for writer, rec in order:
            _write(root, writer, rec)
        rs = read_tree(root).records
        kept.add(repr(sorted(rs[("t", "s_clean", 0)].items())))
    assert len(kept) == 1  # the same record whatever the order
    assert "'worker', 'w3'" in kept.pop()  # of the two trials, the fixed order picks w3's


def test_a_writers_own_later_record_replaces_its_earlier_one(tmp_path: Path) -> None:
    for error, at in (("first", "2026-12-01T10:00:01+00:00"), ("second", "2026-12-01T10:00:09+00:00")):
        _write(tmp_path, "w1", record("s", "t", 0, False, error=error, finished_at=at))
    assert read_tree(tmp_path).records[("t", "s_clean", 0)]["error"] == "second"
