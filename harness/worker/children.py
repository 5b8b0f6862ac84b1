"""Child processes that die with their worker, and only with it.

A worker killed with SIGKILL (OOM, chaos, `scancel --signal=KILL`) cannot clean up, so its model
server and sim client are started with the kernel's parent-death signal: they are signalled when
the worker dies, and never serve or write on behalf of a dead worker. That signal fires when the
*thread* that forked the child exits, not the process: a model server restarted by a sim slot's
thread would get SIGTERM as soon as that slot found no more work, under the slots still mid-episode.
So every child is forked by one spawner thread, started on first use, that never returns before its
process exits (callers wait for its Popen). Each child gets its own session so that stopping it also
stops whatever it started (video encoders, renderers).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from harness.queue.owner import start_ticks

_PR_SET_PDEATHSIG = 1
_SIG_DFL = 0
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_prctl = _libc.prctl
_signal = _libc.signal
_signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
_signal.restype = ctypes.c_void_p


def _die_with_parent(sig: int) -> Callable[[], None]:
    parent = os.getpid()

    def setup() -> None:  # runs in the child between fork and exec: keep it to plain syscalls
        # The forked child still has its parent's handler for `sig` (the worker's SIGTERM flag)
        # until exec: a parent-death signal landing before exec would be caught there and lost,
        # and the child would exec and serve on, orphaned. So `sig` kills from here on.
        _signal(sig, _SIG_DFL)
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
    return _SPAWNER.run(
        lambda: subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent(death_signal),  # child side: only a prctl, no Python locks
        )
    )


class _Spawner:
    """One daemon thread that runs every Popen of this process, so that each child's parent-death
    signal is tied to a thread that lives exactly as long as the process. Started on first use, and
    again in a forked child (where the parent's threads do not exist)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._starts: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen], Future]] = queue.SimpleQueue()

    def run(self, start: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        """`start()`, run on the spawner thread; its result, or its exception raised here."""
        done: Future[subprocess.Popen] = Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._starts = queue.SimpleQueue()
                self._thread = threading.Thread(
                    target=self._serve, args=(self._starts,), name="spawner", daemon=True
                )
                self._thread.start()
            self._starts.put((start, done))
        return done.result()

    @staticmethod
    def _serve(starts: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen], Future]]) -> None:
        while True:  # never returns: its children would get their parent-death signal
            start, done = starts.get()
            try:
                done.set_result(start())
            except BaseException as exc:  # the caller gets it (a missing program, a bad cwd)
                done.set_exception(exc)


_SPAWNER = _Spawner()


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
