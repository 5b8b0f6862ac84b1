"""The worker's one persistent model server: started once, restarted if it dies.

The policy is loaded once per worker, not once per unit (loading is the slow part). The server
publishes its address in a ready file in the worker's private temp dir, so several workers on a
node never collide, and dies with the worker (parent-death signal).

With SIM_AS_SERVER=1 only the sockets' roles swap: each sim client listens and publishes
`client_ready_file`, and the model side (`--connect`) dials every sim client that publishes it, one
after another. The model side then reports its loaded policy in `ready_file` (`--info-file`), so the
worker waits on the same file either way.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from harness.config.settings import Settings
from harness.model.wrapper import server_python
from harness.process.failures import Failed
from harness.queue.owner import process_stopped
from harness.wire.errors import WireError
from harness.wire.readyfile import read_ready
from harness.worker import children


class ModelServerFailed(Failed):
    """The worker cannot have a model server: it could not be started, or it died too often (the
    worker's restart limit); the message says why and where its log is. A policy the server refuses
    to load says so in that log (`harness.model.wrapper.PolicyRefused`)."""

    def __init__(self, message: str, killed: bool = False) -> None:
        super().__init__(message)
        self.killed = killed  # a signal ended it while starting (not its own failure)


class ModelServerProcess:
    def __init__(self, ready_file: Path, log: Path, env: dict[str, str], settings: Settings) -> None:
        """`env` is the server's environment (it reads its own knobs from it); `settings` the worker's."""
        self.ready_file, self.log, self.env, self.settings = ready_file, log, env, settings
        self.sim_listens = settings.sim_as_server
        # where sim clients find their peer: the server's address, or (sim-as-server) their own
        self.client_ready_file = ready_file.with_name("sim-ready.json") if self.sim_listens else ready_file
        self.proc: subprocess.Popen | None = None
        self.info: dict[str, Any] = {}
        self.starts = 0
        self._lock = threading.Lock()  # the worker's sim slots share this server

    def argv(self) -> list[str]:
        root = Path(self.env.get("EVAL_ROOT", "."))
        python = server_python(self.settings.policy, list(self.settings.policy_args), self.env)
        argv = [python, str(root / "scripts" / "policy_model_server.py")]
        argv += ["--policy", self.settings.policy]
        if self.sim_listens:
            argv += ["--connect", str(self.client_ready_file), "--info-file", str(self.ready_file)]
        else:
            argv += ["--ready-file", str(self.ready_file)]
        ckpt = self.env.get("CKPT_DIR") or self.settings.ckpt_name  # the node-local copy, when staged
        return argv + (["--ckpt", ckpt] if ckpt else [])  # the server reads POLICY_ARGS itself

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stopped(self) -> bool:
        """Alive but stopped (SIGSTOP): it answers nothing until it is continued."""
        return self.proc is not None and self.alive() and process_stopped(self.proc.pid)

    def kill_if_stopped(self) -> bool:
        """Kill it if it is stopped (hung: an episode stalled on it); the next `ensure` starts a new
        one. True if it was."""
        if not self.stopped():
            return False
        self.stop()
        return True

    def ensure(self, timeout_s: float, attempts: int = 3) -> dict[str, Any]:
        """The running server's ready info; (re)starts it first if it is not running. A start that
        a signal killed is retried (up to `attempts` in all); one that failed by itself is not.
        Sim slots call it concurrently: one of them (re)starts the server, the others wait for it;
        the server outlives that slot's thread (harness.worker.children forks it on its spawner)."""
        with self._lock:
            attempt = 1
            while not self.alive():
                try:
                    return self._start(timeout_s)
                except ModelServerFailed as exc:
                    if not exc.killed:
                        raise
                    if attempt >= attempts:
                        why = f"model server died {attempt} times while starting: {exc}"
                        raise ModelServerFailed(why) from None
                    attempt += 1
            return self.info

    def _start(self, timeout_s: float) -> dict[str, Any]:
        if self.proc is not None:
            children.stop(self.proc, grace_s=0)
        self.ready_file.unlink(missing_ok=True)
        self.starts += 1
        self.proc = children.spawn(self.argv(), self.log, self.env, death_signal=signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while not self.ready_file.exists():
            if self.proc.poll() is not None:
                why = last_line(self.log)  # a refusing server's own reason, e.g. naming a checkpoint file
                said = f": {why}" if why else ""
                message = f"model server exited with {self.proc.returncode}{said} (see {self.log})"
                raise ModelServerFailed(message, killed=self.proc.returncode < 0)
            if time.monotonic() > deadline:
                children.stop(self.proc)
                raise ModelServerFailed(f"model server not ready within {timeout_s:g} s: see {self.log}")
            time.sleep(0.1)
        try:
            path = self.ready_file
            self.info = json.loads(path.read_text()) if self.sim_listens else read_ready(path)
        except (OSError, ValueError, WireError) as exc:
            raise ModelServerFailed(f"model server ready file {self.ready_file}: {exc}") from None
        return self.info

    def stop(self) -> None:
        if self.proc is not None:
            children.stop(self.proc)
        self.ready_file.unlink(missing_ok=True)


def last_line(log: Path, limit: int = 500) -> str:
    """The log's last non-empty line (a refusing server's reason, e.g. the checkpoint file it names),
    at most `limit` characters; "" when there is none."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, 2) - 8192))
            tail = handle.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""
