"""Process lifetimes: a worker's children live exactly as long as the worker.

- A child started from a thread that then ends stays up: the kernel's parent-death signal fires when
  the *spawning thread* exits, so every child is spawned from one thread that lives as long as the
  process (a restarted model server must not die with the slot thread that restarted it).
- A child still dies with its process (SIGKILLed: no cleanup ran), whichever thread spawned it,
  even when that death comes between the child's fork and its exec, where it still has the
  parent's SIGTERM handler (a model server orphaned so was seen in CI's NFS chaos run).
- A model server (re)started by a slot's thread serves on after that thread ends.
- A model server, and a worker, under a burst of SIGTERMs (a multi-threaded parent's death can send
  several) exit promptly with 0: their handlers only raise a flag; nothing they do can block on a lock.
  The worker's leases are released, and no process of its run is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.config.settings import Settings
from harness.queue.listing import scan
from harness.worker import children
from harness.worker.model_server_process import ModelServerFailed, ModelServerProcess
from support.leftovers import wait_for_no_leftovers
from support.poolkit import make_run, pool_env, start_worker, stop_group
from support.wirekit import REPO, model_python, start_server_process

SERVERS = 12  # each gets a SIGTERM storm: the old handler hung on one of them nearly every time
STORM_S = 1.0  # signals keep coming this long after the first (or until the server is gone)


def _thread_gone(native_id: int) -> bool:
    return not Path(f"/proc/self/task/{native_id}").exists()


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.02)


def _gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie counts: it runs nothing any more)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


def test_a_child_outlives_the_thread_that_spawned_it(tmp_path: Path) -> None:
    spawned: list[subprocess.Popen] = []
    ids: list[int] = []

    def spawn_and_end() -> None:
        ids.append(threading.get_native_id())
        child = children.spawn(["sleep", "60"], tmp_path / "child.log", {}, death_signal=signal.SIGTERM)
        spawned.append(child)

    thread = threading.Thread(target=spawn_and_end)
    thread.start()
    thread.join()
    proc = spawned[0]
    try:
        _wait(lambda: _thread_gone(ids[0]), 30, "the spawning thread to be gone from /proc")
        with pytest.raises(subprocess.TimeoutExpired):  # the old spawn: -15 as soon as the thread ended
            proc.wait(1.0)
    finally:
        children.stop(proc)


def test_a_model_server_started_by_a_thread_that_ends_serves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POLICY", "hold")
    env = {**os.environ, "PYTHONPATH": str(REPO), "EVAL_ROOT": str(REPO), "CKPT_NAME": ""}
    env["MODEL_PY"] = model_python() or sys.executable
    server = ModelServerProcess(tmp_path / "ready.json", tmp_path / "server.log", env, Settings.from_env(env))
    ids: list[int] = []

    def restart() -> None:  # a slot thread that restarts the server, then finds no more work
        ids.append(threading.get_native_id())
        server.ensure(120)

    thread = threading.Thread(target=restart)
    thread.start()
    thread.join()
    try:
        assert server.proc is not None
        _wait(lambda: _thread_gone(ids[0]), 30, "the restarting thread to be gone from /proc")
        with pytest.raises(subprocess.TimeoutExpired):  # the old spawn: SIGTERMed, a clean exit 0
            server.proc.wait(1.0)
        assert server.ensure(120)["pid"] == server.proc.pid and server.starts == 1
    finally:
        server.stop()


def test_a_model_server_killed_at_every_start_is_given_up_on_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed by a signal while loading, each of 3 times (chaos, OOM): the worker's error says it died."""
    fake = tmp_path / "killed_python"
    fake.write_text("#!/bin/sh\nkill -KILL $$\n")
    fake.chmod(0o755)
    monkeypatch.setenv("POLICY", "hold")
    server = ModelServerProcess(
        tmp_path / "ready.json", tmp_path / "server.log", {"MODEL_PY": str(fake)}, Settings.from_env({})
    )
    died = r"model server died 3 times while starting: .*exited with -9"
    with pytest.raises(ModelServerFailed, match=died):
        server.ensure(30)
    assert server.starts == 3


CHILD_OF_A_THREAD = """
import signal, sys, threading, time
from pathlib import Path
from harness.worker import children
def spawn():
    proc = children.spawn(["sleep", "60"], Path(sys.argv[1]), {}, death_signal=signal.SIGTERM)
    print(proc.pid, flush=True)
for _ in range(3):  # spawned from threads that end, while others stay busy
    t = threading.Thread(target=spawn); t.start(); t.join()
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
time.sleep(60)
"""


def test_children_die_with_their_sigkilled_process(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", CHILD_OF_A_THREAD, str(tmp_path / "child.log")]
    parent = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pids = [int(parent.stdout.readline()) for _ in range(3)]
        time.sleep(0.5)  # the threads that spawned them are gone: the children must still run
        assert not any(_gone(pid) for pid in pids), "a child died with the thread that spawned it"
        parent.kill()
        parent.wait()
        _wait(lambda: all(_gone(pid) for pid in pids), 30, "the children to die with their parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


CAUGHT_BEFORE_EXEC = """
import os, signal, sys, time
from harness.worker import children
signal.signal(signal.SIGTERM, lambda signum, frame: None)  # the worker's own handler only raises a flag
pid = os.fork()
if pid == 0:  # what a child runs between fork and exec, then the parent-death signal lands
    children._die_with_parent(signal.SIGTERM)()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)
    os._exit(0)  # it got past the signal: it would have exec'd and served on, orphaned
print(os.waitpid(pid, 0)[1], flush=True)
"""


def test_a_death_signal_between_fork_and_exec_is_not_caught_by_the_parents_handler() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", CAUGHT_BEFORE_EXEC], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    status = int(out.stdout)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, f"wait status {status}"


def _storm(proc: subprocess.Popen) -> None:
    """SIGTERM `proc` back to back for STORM_S (or until it is gone)."""
    until = time.monotonic() + STORM_S
    while time.monotonic() < until and proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return


def test_a_model_server_under_a_sigterm_storm_exits_promptly(tmp_path: Path) -> None:
    python = model_python() or sys.executable
    procs = []
    try:
        for i in range(SERVERS):
            ready, log = tmp_path / f"ready-{i}.json", tmp_path / f"server-{i}.log"
            procs.append(start_server_process(python, ready, ["--policy", "hold"], log))
        for i in range(SERVERS):
            _wait(lambda i=i: (tmp_path / f"ready-{i}.json").exists(), 120, f"server {i} to be ready")
        storms = [threading.Thread(target=_storm, args=(proc,)) for proc in procs]
        for storm in storms:
            storm.start()
        for storm in storms:
            storm.join()
        deadline = time.monotonic() + 30  # a hung server never exits; a busy machine is given time
        codes = []
        for proc in procs:
            try:
                codes.append(proc.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        hung = [i for i, code in enumerate(codes) if code is None]
        assert not hung, f"servers {hung} still running 30 s after a SIGTERM storm (of {SERVERS})"
        assert codes == [0] * SERVERS, codes
        assert not list(tmp_path.glob("ready-*.json")), "a server left its ready file behind"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_worker_under_a_sigterm_storm_releases_its_leases_and_leaves_nothing(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", f"t{i}") for i in range(4)])
    env = pool_env(run, SIMS_PER_WORKER="2", FASTBENCH_STEPS="40", FASTBENCH_STEP_MS="100")  # 4 s episodes
    log = tmp_path / "w0.log"
    proc = start_worker(env, "w0", log)
    try:
        _wait(lambda: len(scan(run.leases).leased) == 2, 60, "both slots holding a lease")
        _storm(proc)  # eval_worker.sh execs the worker: this is the worker
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, f"worker exit {code} after a SIGTERM storm:\n{log.read_text()}"
    finally:
        stop_group(proc)
    assert all(os.listdir(run.leases / key) == [] for key in scan(run.leases).leased), "a lease not released"
    assert wait_for_no_leftovers(str(tmp_path)) == []
