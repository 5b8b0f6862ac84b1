"""A worker's long-lived sim process, given one unit at a time and watched for stalls, timeouts, fencing.

The process (`eval_policy_client.py`, harness/episode/simserver.py) is started on the first
unit and kept: imports and the renderer start once, not once per unit. Each unit is one assignment line
on its stdin; its end is one `UNIT_END` line on its stdout. While a unit runs, the client replaces
its progress file (`{"seed", "step"}`) at every step. A process whose progress file has not changed
for STALL_TIMEOUT is killed; so is one still running at the unit's deadline, one whose lease was
lost, one the worker is told to stop, and one whose model server died. A killed or dead process is
started again for the next unit. The outcome says which seed was running, so the worker can
record that episode as errored, exactly as when every unit had its own process.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.worker import children

POLL_S = 0.2
UNIT_END = "UNIT_END "  # harness.episode.simserver.UNIT_END: the worker stage does not import episode code
COMPLAINT = "eval_policy_client: "  # how the sim client's lines saying why it cannot run begin
WORKER_STOPPED = 6  # harness.episode.simserver.WORKER_STOPPED: this worker was stopped mid-unit
CLOSE_GRACE_S = 5.0


@dataclass
class SimOutcome:
    returncode: int
    killed: str | None  # why the worker killed it: stalled, unit timeout, cancelled, model server died
    seed: int | None  # the seed running at the end (from the progress file), if any
    said: str | None = None  # the sim client's last line saying why it could not run, if any

    @property
    def worker_stopped(self) -> bool:
        """It ended early because this worker was stopped: the seeds left (and the running one) have
        no record and run again if the worker still holds the lease."""
        return self.killed is None and self.returncode == WORKER_STOPPED


def read_progress(path: Path) -> tuple[bytes, int | None]:
    """The progress file's raw content (for change detection) and its seed."""
    try:
        raw = path.read_bytes()
        seed = json.loads(raw).get("seed")
        return raw, seed if isinstance(seed, int) else None
    except (OSError, ValueError, AttributeError):
        return b"", None


class SimProcess:
    """One persistent sim process; `run` gives it a unit and watches it to the unit's end."""

    def __init__(self, argv: list[str], env: dict[str, str], on_start: Callable[[int], None]) -> None:
        self.argv, self.env, self.on_start = argv, env, on_start
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._answers: queue.Queue[int] = queue.Queue()  # the returncodes of its UNIT_END lines
        self._ended = threading.Event()  # its stdout ended (it exited)
        self._on_line: Callable[[str], None] = lambda line: None
        self._said: str | None = None  # the last COMPLAINT line of the current unit

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the process before its first unit (it warms its renderer meanwhile)."""
        self._ensure()

    def _ensure(self) -> subprocess.Popen:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        self.proc = children.spawn(self.argv, None, self.env, stdin=subprocess.PIPE)
        self._answers, self._ended = queue.Queue(), threading.Event()
        args = (self.proc, self._answers, self._ended)
        threading.Thread(target=self._relay, args=args, daemon=True).start()
        self.starts += 1
        self.on_start(self.proc.pid)
        return self.proc

    def run(
        self,
        assignment: dict,
        on_line: Callable[[str], None],
        progress: Path,
        stall_s: float,
        deadline: float,
        cancel: list[threading.Event],
        peer_alive: Callable[[], bool] | None = None,
    ) -> SimOutcome:
        """Run `assignment` (a unit: run_dir, scene, task, seeds, writer_id, progress_file) to its end,
        passing each line the process prints to `on_line`; kill the process on a stall, at
        `deadline` (monotonic), on any `cancel` event, or as soon as its peer (the model server) is
        dead: a client dialling a dead server's stale ready file would otherwise wait for the stall."""
        progress.unlink(missing_ok=True)
        self._on_line, self._said = on_line, None
        proc = self._ensure()
        try:
            assert proc.stdin is not None
            proc.stdin.write((json.dumps(assignment) + "\n").encode())
            proc.stdin.flush()
        except OSError:  # it died between units: what it exited with is this unit's outcome
            returncode = self._reap(proc)
            self._ended.wait(CLOSE_GRACE_S)  # its last lines relayed: what it said before it died
            return SimOutcome(returncode, None, None, self._said)
        answers, ended = self._answers, self._ended
        last_raw, seed = b"", None
        last_change = time.monotonic()
        killed, returncode = None, None
        while True:
            try:
                returncode = answers.get(timeout=POLL_S)
                break
            except queue.Empty:
                pass
            if proc.poll() is not None:  # it exited: with its answer still in the pipe, or mid-unit
                ended.wait(CLOSE_GRACE_S)
                returncode = answers.get_nowait() if not answers.empty() else self._reap(proc)
                break
            raw, now_seed = read_progress(progress)
            now = time.monotonic()
            if raw != last_raw:
                last_raw, last_change = raw, now
                seed = now_seed if now_seed is not None else seed
            if now - last_change > stall_s:
                killed = "stalled"
            elif now > deadline:
                killed = "unit timeout"
            elif any(event.is_set() for event in cancel):
                killed = "cancelled"
            elif peer_alive is not None and not peer_alive():
                killed = "model server died"
            if killed:
                returncode = self._reap(proc, kill=True)
                break
        _, final_seed = read_progress(progress)
        return SimOutcome(returncode, killed, final_seed if final_seed is not None else seed, self._said)

    def _reap(self, proc: subprocess.Popen, kill: bool = False) -> int:
        """Its exit status; killed first (with its session) when `kill`. The next unit starts anew."""
        code = children.stop(proc) if kill else proc.wait()
        if self.proc is proc:
            self.proc = None
        return code

    def close(self) -> None:
        """End the process: stdin closed (it exits between units), killed after a grace period."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            children.stop(proc)

    def _relay(self, proc: subprocess.Popen, answers: queue.Queue[int], ended: threading.Event) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line.startswith(UNIT_END):
                try:
                    answers.put(int(json.loads(line[len(UNIT_END) :])["returncode"]))
                    continue
                except (ValueError, KeyError, TypeError):
                    pass  # not an answer after all: it is a log line
            if line.startswith(COMPLAINT):
                self._said = line
            self._on_line(line)
        ended.set()
