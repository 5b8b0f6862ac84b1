"""The persistent sim process (`eval_policy_client.py`) as a worker runs it: a real process
given assignment lines, a real model server, a run created the proper way. What goes wrong with a unit's
videos must never end the process: the next assignment must still be served by the same pid. A assignment in a
run dir without its run.yaml is refused, never run outside a contract."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.config.contract import CODE_REFUSED_EXIT
from harness.config.create import create_run
from harness.config.manifest import ManifestError
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.records import read_tree
from harness.episode.simclient import SimAssignment
from harness.episode.simserver import UNIT_END, external_client, run_assignment
from support.fastbench import FastBench
from support.poolkit import REPO, SLEEP_POLICY
from support.wirekit import running_server

ANSWER_S = 120  # generous: the process imports the harness and the benchmark before its first assignment

DEFAULTS = Settings.from_env({})  # every knob at its default


class ServeProcess:
    """`eval_policy_client.py` with its stdout read line by line in a thread."""

    def __init__(self, env: dict[str, str], ready: Path, *extra: str) -> None:
        script = REPO / "scripts" / "eval_policy_client.py"
        argv = [sys.executable, str(script), "--ready-file", str(ready), *extra]
        self.proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.said: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def assignment(self, assignment: dict) -> dict:
        """Send one assignment line; the answer of its UNIT_END line (the lines before it go to `said`)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(assignment) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.lines.get(timeout=ANSWER_S)
            if line is None:
                raise AssertionError(f"the sim process exited ({self.proc.wait()}): {self.said[-5:]}")
            if line.startswith(UNIT_END):
                return json.loads(line[len(UNIT_END) :])
            self.said.append(line)

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(ANSWER_S)


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    queue_file = tmp_path / "queue.txt"
    queue_file.write_text("table A\ntable B\n")
    env = dict(os.environ, USE_EVAL_SEEDS="0", EVAL_TEST_NUM="2", BENCH_CONFIG="clean", CKPT_NAME="")
    create_run(tmp_path / "run", queue_file, env)
    return RunDir(tmp_path / "run")


def test_broken_videos_keep_the_trial_and_the_process_serves_the_next_assignment(
    run: RunDir, tmp_path: Path
) -> None:
    """Issue 20, item 3: a `videos` that is a file made a success an errored record; a final rename
    that failed killed the persistent sim (the trial became "sim client exited")."""
    a_dir = run.result_dir("A", "sleep", "table_clean", "")
    a_dir.mkdir(parents=True)
    (a_dir / "videos").write_text("a regular file: mkdir videos/ fails")
    b_dir = run.result_dir("B", "sleep", "table_clean", "")
    (b_dir / "videos" / "seed1.mp4" / "taken").mkdir(parents=True)  # the final rename fails
    env = dict(
        os.environ, PYTHONPATH=str(REPO), EVAL_ROOT=str(REPO), BENCHMARK="tests.support.fastbench:FastBench",
        RECORD_VIDEO="1", BENCH_CONFIG="clean", FASTBENCH_STEPS="3", FASTBENCH_STEP_MS="1",
    )  # fmt: skip
    assignment = {"run_dir": str(run.root), "scene": "table", "seeds": [1], "writer_id": "w0"}
    with running_server(tmp_path, SLEEP_POLICY):
        sim = ServeProcess(env, tmp_path / "ready.json")
        try:
            first = sim.assignment({**assignment, "task": "A"})
            second = sim.assignment({**assignment, "task": "B"})
            third = sim.assignment({**assignment, "task": "B", "seeds": [2]})  # its video can be written
            assert sim.close() == 0
        finally:
            if sim.proc.poll() is None:
                sim.proc.kill()
    assert [first["returncode"], second["returncode"], third["returncode"]] == [0, 0, 0], sim.said
    assert first["pid"] == second["pid"] == third["pid"] == sim.proc.pid  # one process served all three
    records = read_tree(run.results).records
    for task in ("A", "B"):
        rec = records[(task, "table_clean", 1)]
        assert (rec["error"], rec["success"], rec["steps"], rec["video"]) == (None, True, 3, None), rec
    warnings = [line for line in sim.said if "warning: video seed1.mp4 not written" in line]
    assert len(warnings) == 2 and "FileExistsError" in warnings[0], sim.said
    assert records[("B", "table_clean", 2)]["video"] == "videos/seed2.mp4"


def test_the_canary_runs_in_the_warm_up_before_any_job_and_says_so_at_the_first(
    run: RunDir, tmp_path: Path
) -> None:
    """Issue 59: the canary ran in the sim client after the model server was up, adding its cost to
    the worker's time to its first episode; in the warm-up it overlaps the model server's load. Its
    steps replace the progress file (the worker's stall watch), its line opens the first unit's log,
    and the first assignment runs no second canary."""
    env = dict(
        os.environ, PYTHONPATH=str(REPO), EVAL_ROOT=str(REPO), BENCHMARK="tests.support.fastbench:FastBench",
        RECORD_VIDEO="0", BENCH_CONFIG="clean", USE_EVAL_SEEDS="0", FASTBENCH_STEPS="3",
        FASTBENCH_STEP_MS="1",
    )  # fmt: skip
    progress = tmp_path / "progress.json"
    ready = tmp_path / "ready.json"
    sim = ServeProcess(env, ready, "--canary-run", str(run.root), "--progress-file", str(progress))
    try:
        verdicts = run.root / "canary"
        deadline = time.monotonic() + ANSWER_S
        while not any(verdicts.glob("*.json")):  # no assignment sent, no model server: the warm-up alone
            assert time.monotonic() < deadline and sim.proc.poll() is None, "no canary in the warm-up"
            time.sleep(0.1)
        assert (verdicts / "reference.npz").exists()
        assert json.loads(progress.read_text())["seed"] is None  # told each step, no seed named
        assert sim.lines.empty()  # nothing said before the first assignment: it would be lost
        with running_server(tmp_path, SLEEP_POLICY):
            answer = sim.assignment(
                {"run_dir": str(run.root), "scene": "table", "task": "A", "seeds": [1], "writer_id": "w0"}
            )
            assert sim.close() == 0
    finally:
        if sim.proc.poll() is None:
            sim.proc.kill()
    assert answer["returncode"] == 0, sim.said
    canary_lines = [line for line in sim.said if line.startswith("canary ")]
    assert len(canary_lines) == 1 and "this node's canary is the run's reference" in canary_lines[0], sim.said
    assert sim.said[0] == canary_lines[0]


def test_an_assignment_in_a_run_dir_without_its_manifest_is_refused(tmp_path: Path) -> None:
    """A missing run.yaml used to skip the sim client's code check (it ran outside any contract)."""
    (tmp_path / "queue.txt").write_text("table A\n")
    said: list[str] = []
    assignment = SimAssignment(tmp_path, "table", "A", [1], "w0")
    code = run_assignment(DEFAULTS, FastBench(), assignment, tmp_path / "no-server.json", 0.3, said.append)
    assert code == CODE_REFUSED_EXIT, said
    assert len(said) == 1 and "refusing to run" in said[0] and str(RunDir(tmp_path).manifest) in said[0]
    assert "scripts/new_run.py" in said[0]


def test_an_external_server_client_needs_the_runs_manifest(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"run\.yaml does not exist"):
        external_client(DEFAULTS, tmp_path)
