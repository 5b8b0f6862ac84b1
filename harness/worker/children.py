"""Child processes that die with their worker.

A worker killed with SIGKILL (OOM, chaos, `scancel --signal=KILL`) cannot clean up, so its model
server and sim client are started with the kernel's parent-death signal: they are signalled when
the worker dies, and never serve or write on behalf of a dead worker. Each child gets its own
session so that stopping it also stops whatever it started (video encoders, renderers).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.queue.owner import start_ticks

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_prctl = _libc.prctl


def _die_with_parent(sig: int) -> Callable[[], None]:
    parent = os.getpid()

    def setup() -> None:  # runs in the child between fork and exec: keep it to plain syscalls
        _prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), sig)

    return setup


def spawn(
    argv: list[str], log: Path | None, env: dict[str, str], death_signal: int = signal.SIGKILL,
    stdin: int = subprocess.DEVNULL,
) -> subprocess.Popen:  # fmt: skip
    """Start `argv` with stdout and stderr appended to `log` (None: one pipe, `proc.stdout`); it
    gets `death_signal` when we die. `stdin=subprocess.PIPE` gives it a pipe we write to."""
    if log is None:
        return _popen(argv, subprocess.PIPE, env, death_signal, stdin)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return _popen(argv, out, env, death_signal, stdin)


def _popen(argv: list[str], out: Any, env: dict[str, str], death_signal: int, stdin: int) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        stdin=stdin,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent(death_signal),  # child side: only a prctl, no Python locks
    )


def stop(proc: subprocess.Popen, grace_s: float = 5.0) -> int:
    """SIGTERM the child's session, SIGKILL after `grace_s`; its exit status."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            return proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc, signal.SIGKILL)
    return proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def sweep_dead_temp_dirs(prefix: str) -> list[Path]:
    """Remove the temp dirs `<tmp>/<prefix><pid>-*` whose pid is gone (a SIGKILLed worker cannot
    clean up after itself); the dirs removed. A dir of a live pid is left alone; `prefix` names the
    PID namespace, so a container sharing /tmp never judges another namespace's pids."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{prefix}*-*"):
        pid = path.name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or start_ticks(int(pid)) is not None:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed

