"""The worker ⇄ sim process job protocol (`eval_policy_client.py --serve`): one JSON job line per unit,
one UNIT_END answer line per job, a bad line answered with a clear error and the process kept."""

from __future__ import annotations

import io
import json
from pathlib import Path

from harness.episode.simserver import UNIT_END, serve
from support.fastbench import FastBench


def _answers(out: str) -> list[dict]:
    return [json.loads(line[len(UNIT_END) :]) for line in out.splitlines() if line.startswith(UNIT_END)]


def test_each_job_line_gets_one_answer_and_a_bad_line_is_named(tmp_path: Path) -> None:
    job = {"run_dir": str(tmp_path), "scene": "s", "task": "t", "seeds": [0], "writer_id": "w"}
    lines = ["not json", "", json.dumps({**job, "seeds": []}), json.dumps({"scene": "s"}), json.dumps(job)]
    out = io.StringIO()
    assert serve(FastBench(), tmp_path / "no-server.json", 0.3, None, io.StringIO("\n".join(lines)), out) == 0
    text = out.getvalue()
    assert [a["returncode"] for a in _answers(text)] == [2, 2, 2, 2]  # the blank line is no job
    assert "job line is not JSON" in text
    assert "seeds must be a non-empty list of integers, got []" in text
    assert "job line lacks run_dir, task, seeds, writer_id" in text
    assert "cannot start" in text and "no-server.json" in text  # the good job: no model server there
