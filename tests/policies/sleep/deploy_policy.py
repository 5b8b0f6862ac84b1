"""Test double: a policy that only sleeps (load_s once, infer_ms + per_item_ms · B per batch of B
requests) and returns zeros, so queue and worker tests exercise a real model server without a model.

SLEEP_POLICY_DIE_ONCE=<path>: the first server to load (the one that creates <path>) stops its sim
client (SIGSTOP) while loading, exits on its own once the worker has written that client its first
job, and lets the client go on 2 s later, so it reads the job and dials only after the death: the
worker checked the server alive, then it died, leaving a stale ready file. Stopped before the job
comes, the client cannot take it unseen (a watcher that polled it running raced a 50 ms unit).
SLEEP_POLICY_DIE_AT_SEED=<path>:<seed>: the first server to see an observation of <seed> (and create
<path>) exits there, mid-episode."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


class Sleeper:
    def __init__(self, usr_args: dict[str, Any]) -> None:
        self.shape = (usr_args["num_actions"], usr_args["action_dim"])
        self.delay = float(os.environ.get("SLEEP_POLICY_MS", usr_args.get("infer_ms", 2))) / 1000
        self.per_item = float(usr_args.get("per_item_ms", 0)) / 1000

    def generate_actions(self, proprio: np.ndarray) -> np.ndarray:
        """A batch costs infer_ms + per_item_ms per request, like a model on an accelerator."""
        time.sleep(self.delay + self.per_item * len(proprio))
        return np.zeros((len(proprio), *self.shape), np.float32)


def _stop_the_client() -> str:
    """The pid of this server's sim client (the worker starts it before the server), stopped."""
    ready = sys.argv[sys.argv.index("--ready-file") + 1]
    while not (pids := _clients(ready)):
        time.sleep(0.005)
    os.kill(int(pids[0]), signal.SIGSTOP)
    return pids[0]


def _exit_once_the_client_has_its_assignment(pid: str) -> None:
    while not _stdin_pending(pid):
        time.sleep(0.005)
    subprocess.Popen(["sh", "-c", f"sleep 2; kill -CONT {pid}"], start_new_session=True)
    os._exit(1)


def _clients(ready: str) -> list[str]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"eval_policy_client.py") for a in args) and ready.encode() in args:
            pids.append(cmdline.parent.name)
    return pids


def _stdin_pending(pid: str) -> bool:
    """Bytes wait in the process's stdin pipe (it is stopped: nothing reads them)."""
    try:
        fd = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0] > 0
    except OSError:
        return False
    finally:
        os.close(fd)


def get_model(usr_args: dict[str, Any]) -> Sleeper:
    time.sleep(float(usr_args.get("load_s", 0)))
    marker = os.environ.get("SLEEP_POLICY_DIE_ONCE")
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            pid = _stop_the_client()
            threading.Thread(
                target=_exit_once_the_client_has_its_assignment, args=(pid,), daemon=True
            ).start()
    return Sleeper(usr_args)


def encode_obs(obs: dict[str, Any]) -> dict[str, Any]:
    marker, _, seed = os.environ.get("SLEEP_POLICY_DIE_AT_SEED", "").rpartition(":")
    if marker and obs["episode"]["seed"] == int(seed):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            os._exit(1)  # mid-episode, once: the server dies during the unit
    return {"proprio": np.asarray(obs["proprio"]).reshape(1, -1)}


def reset_model(model: Sleeper) -> None:
    """Stateless."""
