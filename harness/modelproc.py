"""The worker's one persistent model server: started once, restarted if it dies.

The policy is loaded once per worker, not once per unit (loading is the slow part). The server
publishes its address in a ready file in the worker's private temp dir, so several workers on a
node never collide, and dies with the worker (parent-death signal).
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from harness import children, knobs
from harness.wire.errors import WireError
from harness.wire.readyfile import read_ready


class ModelServerError(RuntimeError):
    """The model server could not be started; the message says why and where its log is."""


class ModelServer:
    def __init__(self, ready_file: Path, log: Path, env: dict[str, str]) -> None:
        self.ready_file, self.log, self.env = ready_file, log, env
        self.proc: subprocess.Popen | None = None
        self.info: dict[str, Any] = {}
        self.starts = 0

    def argv(self) -> list[str]:
        root = Path(self.env.get("EVAL_ROOT", "."))
        argv = [self.env.get("MODEL_PY", "python"), str(root / "scripts" / "policy_model_server.py")]
        argv += ["--policy", knobs.get("POLICY"), "--ready-file", str(self.ready_file)]
        if knobs.get("CKPT_NAME"):
            argv += ["--ckpt", knobs.get("CKPT_NAME")]
        for item in knobs.get("POLICY_ARGS").split():
            argv += ["--set", item]
        return argv

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure(self, timeout_s: float) -> dict[str, Any]:
        """The running server's ready info; (re)starts it first if it is not running."""
        if self.alive():
            return self.info
        if self.proc is not None:
            children.stop(self.proc, grace_s=0)
        self.ready_file.unlink(missing_ok=True)
        self.starts += 1
        self.proc = children.spawn(self.argv(), self.log, self.env, death_signal=signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while not self.ready_file.exists():
            if self.proc.poll() is not None:
                raise ModelServerError(f"model server exited with {self.proc.returncode}: see {self.log}")
            if time.monotonic() > deadline:
                children.stop(self.proc)
                raise ModelServerError(f"model server not ready within {timeout_s:g} s: see {self.log}")
            time.sleep(0.1)
        try:
            self.info = read_ready(self.ready_file)
        except WireError as exc:
            raise ModelServerError(str(exc)) from None
        return self.info

    def stop(self) -> None:
        if self.proc is not None:
            children.stop(self.proc)
        self.ready_file.unlink(missing_ok=True)
