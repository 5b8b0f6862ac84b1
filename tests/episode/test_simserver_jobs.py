"""The worker ⇄ sim process assignment protocol (`eval_policy_client.py`), through
`harness.episode.simserver.serve` in this process: one JSON assignment line per unit, one UNIT_END answer
line per assignment, a bad line answered with a clear error and the process kept. The real process, as a
worker runs it, is tests/episode/test_simserver.py's."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from harness.config.contract import CODE_REFUSED_EXIT
from harness.config.create import create_run
from harness.config.settings import Settings
from harness.episode.simserver import CANNOT_START, LOST_SERVER, NO_BENCHMARK, UNIT_END, WORKER_STOPPED, serve
from harness.worker import faults, sim_process
from support.fastbench import FastBench

DEFAULTS = Settings.from_env({})  # every knob at its default


def _answers(out: str) -> list[dict]:
    return [json.loads(line[len(UNIT_END) :]) for line in out.splitlines() if line.startswith(UNIT_END)]


def test_each_assignment_line_gets_one_answer_and_a_bad_line_is_named(tmp_path: Path) -> None:
    (tmp_path / "queue.txt").write_text("s t\n")
    create_run(tmp_path, tmp_path / "queue.txt", {**os.environ, "USE_EVAL_SEEDS": "0"})  # a created run
    assignment = {"run_dir": str(tmp_path), "scene": "s", "task": "t", "seeds": [0], "writer_id": "w"}
    lines = [
        "not json",
        "",
        json.dumps({**assignment, "seeds": []}),
        json.dumps({"scene": "s"}),
        json.dumps(assignment),
    ]
    out = io.StringIO()
    assert (
        serve(
            DEFAULTS, FastBench(), tmp_path / "no-server.json", 0.3, None, io.StringIO("\n".join(lines)), out
        )
        == 0
    )
    text = out.getvalue()
    assert [a["returncode"] for a in _answers(text)] == [2, 2, 2, 2]  # the blank line is no assignment
    assert "assignment line is not JSON" in text
    assert "seeds must be a non-empty list of integers, got []" in text
    assert "assignment line lacks run_dir, task, seeds, writer_id" in text
    assert "cannot start" in text and "no-server.json" in text  # the good assignment: no model server there


class _Jobs(io.StringIO):
    """Job lines that note when the first one is read."""

    def __init__(self, text: str, seen: list[str]) -> None:
        super().__init__(text)
        self.seen = seen

    def __iter__(self):
        self.seen.append("first assignment read")
        return super().__iter__()


class _WarmBench(FastBench):
    def __init__(self, seen: list[str], fail: bool = False) -> None:
        super().__init__()
        self.seen, self.fail = seen, fail

    def warm_up(self) -> None:
        self.seen.append("warm-up")
        if self.fail:
            raise RuntimeError("no Vulkan device")


def test_the_benchmark_warms_up_before_the_first_assignment(tmp_path: Path, capsys) -> None:
    seen: list[str] = []
    out = io.StringIO()
    assert (
        serve(DEFAULTS, _WarmBench(seen), tmp_path / "none.json", 0.3, None, _Jobs("not json\n", seen), out)
        == 0
    )
    assert seen == ["warm-up", "first assignment read"]
    assert [a["returncode"] for a in _answers(out.getvalue())] == [2]


def test_a_failed_warm_up_ends_the_process_with_the_node_exit_status(tmp_path: Path, capsys) -> None:
    """A renderer that cannot start fails every episode on this node: the process says so and exits
    NO_BENCHMARK, which the worker reads as the node's fault, not the units' (issue 20)."""
    seen: list[str] = []
    out = io.StringIO()
    bench = _WarmBench(seen, fail=True)
    assert (
        serve(DEFAULTS, bench, tmp_path / "none.json", 0.3, None, _Jobs("not json\n", seen), out)
        == NO_BENCHMARK
    )
    said = capsys.readouterr().err
    assert "cannot start: the benchmark's warm-up failed: RuntimeError('no Vulkan device')" in said
    assert seen == ["warm-up"] and _answers(out.getvalue()) == []  # no assignment read


def test_the_worker_reads_the_sim_exit_statuses_the_sim_uses() -> None:
    """The worker mirrors the sim's exit statuses (it does not import the sim's code): they agree."""
    mirrored = (faults.CANNOT_START, faults.LOST_SERVER, faults.NO_BENCHMARK, sim_process.WORKER_STOPPED)
    assert mirrored == (CANNOT_START, LOST_SERVER, NO_BENCHMARK, WORKER_STOPPED)
    assert len({CANNOT_START, LOST_SERVER, NO_BENCHMARK, WORKER_STOPPED, CODE_REFUSED_EXIT}) == 5
