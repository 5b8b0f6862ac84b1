"""status on a run dir holding units in every state: done, leased (alive and stale), pending, quarantined."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from rich.console import Console

from harness.config.create import create_run
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.queue.units import Unit
from harness.results.status import collect, planned_units
from harness.results.status_view import render
from harness.runqueue import open_queue
from support.results_fixtures import record, write_records

REPO = Path(__file__).resolve().parents[2]
CELLS = ["table pick_cube", "table push_cube", "shelf stack", "shelf open_drawer", "shelf close_drawer"]
NOW = datetime.fromisoformat("2025-01-01T00:01:00+00:00").timestamp()


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunDir:
    for name, value in {
        "USE_EVAL_SEEDS": "0",
        "EVAL_TEST_NUM": "4",
        "UNIT_SEEDS": "2",
        "HEARTBEAT_S": "0.2",
        "LEASE_TTL": "30",
        "CRASH_LIMIT": "3",
        "RUNS_ROOT": str(tmp_path),
        "BENCHMARK": "tests.support.fastbench:FastBench",
    }.items():
        monkeypatch.setenv(name, value)
    queue = tmp_path / "queue.txt"
    queue.write_text("\n".join(CELLS) + "\n")
    create_run(tmp_path / "run1", queue)
    monkeypatch.setenv("EVAL_TEST_NUM", "10")  # the plan comes from run.yaml, not this environment
    return RunDir(tmp_path / "run1")


def _text(run: RunDir) -> str:
    console = Console(record=True, width=160)
    console.print(render(collect(run, Settings.from_env(os.environ), now=NOW)))
    return console.export_text()


def test_fresh_run_all_pending(run: RunDir) -> None:
    status = collect(run, Settings.from_env(os.environ), now=NOW)
    assert status.plan_source == "run.yaml" and status.planned == 20
    assert status.counts == {"done": 0, "leased": 0, "pending": 10, "quarantined": 0}
    assert status.per_hour is None and status.eta_s is None and status.sr.n == 0
    assert "episodes: 0 of 20 done" in _text(run) and "ETA: unknown" in _text(run)


def _stale_lease(run: RunDir, key: str) -> None:
    """A lease whose owner (on another host) stopped beating 1000 s ago."""
    lease = run.leases / key
    lease.mkdir(parents=True)
    owner = {"host": "node9", "pid": 4242, "worker": "node9.w1", "slurm_job_id": "", "generation": "g1"}
    (lease / "owner.g1.3").write_text(json.dumps(owner))  # generation g1, third heartbeat
    old = time.time() - 1000
    os.utime(lease / "owner.g1.3", (old, old))


def _crash(run: RunDir, unit: Unit, error: str) -> None:
    """One errored attempt of `unit`, recorded through the queue as a worker records it."""
    queue = open_queue(run, "node1.w0", Settings.from_env(os.environ), [unit])
    lease = queue.claim()
    assert lease is not None and lease.unit == unit
    queue.release_errored(lease, error)


def test_every_state(run: RunDir) -> None:
    units, _ = planned_units(run)
    queue = open_queue(run, "node1.w0", Settings.from_env(os.environ), units)
    done = queue.claim()
    assert done is not None and queue.mark(done, True)
    alive = queue.claim()
    assert alive is not None
    rest = [u for u in units if u.key not in (done.unit.key, alive.unit.key)]
    finished = [f"2025-01-01T00:00:{10 + i:02d}+00:00" for i in range(2)]
    write_records(
        run,
        [
            record(done.unit.scene, done.unit.task, s, i == 1, finished_at=finished[i])
            for i, s in enumerate(done.unit.seeds)
        ],
    )
    errored = alive.unit
    write_records(
        run,
        [
            record(
                errored.scene,
                errored.task,
                errored.seeds[0],
                False,
                error="sapien crashed",
                finished_at="2025-01-01T00:00:30+00:00",
            )
        ],
    )
    _stale_lease(run, rest[0].key)
    for _ in range(3):
        _crash(run, rest[1], "model server died")
    _crash(run, rest[2], "stalled 300 s")
    try:
        status = collect(run, Settings.from_env(os.environ), now=NOW)
        assert status.counts == {"done": 1, "leased": 2, "pending": 6, "quarantined": 1}
        assert (status.planned, status.done, status.errored) == (20, 2, 1)
        assert (status.sr.k, status.sr.n) == (1, 2)
        stale = {u.key: u.stale for u in status.leases}
        assert stale[alive.unit.key] is None and "no heartbeat" in str(stale[rest[0].key])
        assert status.per_hour == pytest.approx(3 * 3600 / 50)  # 3 records in the 50 s since the first
        assert status.eta_s == pytest.approx(18 / status.per_hour * 3600)
        text = _text(run)
        assert "units: 10  done 1  leased 2  pending 6  quarantined 1" in text
        assert "STALE: no heartbeat" in text and "alive" in text and "node9:4242" in text
        assert "quarantined): model server died" in text and "1 errored attempt(s)): stalled 300 s" in text
        assert f"seed {errored.seeds[0]} on node1: sapien crashed" in text
        assert not [n for n in os.listdir(run.leases) if n.startswith(".probe.")]
    finally:
        assert queue.mark(alive, False)


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_cli_once_and_watch(run: RunDir, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    once = subprocess.run(
        [sys.executable, str(REPO / "scripts/status.py"), "run1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert once.returncode == 0, once.stderr
    assert "units: 10" in once.stdout
    master, terminal = pty.openpty()  # a terminal, as a person watching has: rich draws live frames
    watch = subprocess.Popen(
        [sys.executable, str(REPO / "scripts/status.py"), str(run.root), "--watch", "--interval", "0.2"],
        env=env,
        stdout=terminal,
        stderr=subprocess.PIPE,
        text=True,
        # ^C as a person's terminal delivers it: a suite started in the background (`cmd &` in a
        # script) runs with SIGINT ignored, which its children inherit, and Python then installs no
        # KeyboardInterrupt handler, so the watcher never saw the test's ^C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(terminal)
    screen, deadline = "", time.monotonic() + 120
    while "units: 10" not in ANSI.sub("", screen) and time.monotonic() < deadline:
        if select.select([master], [], [], 0.5)[0]:
            screen += os.read(master, 65536).decode(errors="replace")
    watch.send_signal(signal.SIGINT)
    # keep reading the terminal while it exits: a watcher whose frames nobody reads blocks writing
    # the next one (a pty holds a few KiB), and then on restoring the terminal after ^C
    deadline = time.monotonic() + 60
    while watch.poll() is None and time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            with contextlib.suppress(OSError):  # EIO once its side is closed
                os.read(master, 65536)
    assert watch.wait(5) == 0, watch.stderr.read()  # type: ignore[union-attr]
    os.close(master)
    assert "units: 10" in ANSI.sub("", screen)
    missing = subprocess.run(
        [sys.executable, str(REPO / "scripts/status.py"), str(tmp_path / "nope")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "not found" in missing.stderr
