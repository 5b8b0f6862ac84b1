"""Who holds a lease: the owner record, and whether that owner is provably dead.

A pid alone is not an identity (pids are reused, and mean nothing outside their PID namespace), so
the record carries the process start time, the PID namespace and the host's boot id. Another
process on the same host can then tell for certain that the owner is gone; on other hosts only the
heartbeat age or Slurm (the owner's job ended) can say so.
"""

from __future__ import annotations

import os
import socket
import time
from functools import cache
from typing import Any


@cache
def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None if no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after its closing parenthesis.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[19])


def process_stopped(pid: int) -> bool:
    """True while process `pid` is stopped (state T or t in /proc/<pid>/stat: SIGSTOP, a debugger)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :][:1] in (b"T", b"t")


@cache
def pid_namespace() -> str:
    """This process's PID namespace (`pid:[<inode>]`): pids mean something only within one."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def namespace_tag() -> str:
    """This PID namespace's inode number, for names that must say whose pid they carry ("x" when
    unknown: then no name of ours is ever judged by its pid)."""
    return "".join(c for c in pid_namespace() if c.isdigit()) or "x"


@cache
def _own_start_ticks(pid: int) -> int | None:
    return start_ticks(pid)  # keyed by pid: a forked child asks again


def owner_record(worker_id: str, generation: str) -> dict[str, Any]:
    """This process as a lease owner."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "pid_ns": pid_namespace(),
        "pid": pid,
        "start_ticks": _own_start_ticks(pid),
        "worker": worker_id,
        "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
        "claimed_at": time.time(),
        "generation": generation,
    }


def pid_gone_here(host: str, namespace: str, pid: str) -> bool | None:
    """Whether the process a name (`<host>`, `namespace_tag()`, `<pid>`) was made by is gone: None
    when the pid cannot say (another host, another PID namespace, an unknown one): then only the
    thing's age can."""
    if host != socket.gethostname() or namespace != namespace_tag() or namespace == "x" or not pid.isdigit():
        return None
    return start_ticks(int(pid)) is None


def dead_on_this_host(record: dict[str, Any]) -> bool:
    """True only when the owner ran on this host (this boot, this PID namespace) and its process no
    longer exists. Containers may share a hostname and boot id but not the PID namespace."""
    if record.get("host") != socket.gethostname() or record.get("boot_id") != boot_id() or not boot_id():
        return False
    if record.get("pid_ns") != pid_namespace() or not pid_namespace():
        return False
    pid = record.get("pid")
    if not isinstance(pid, int):
        return False
    return start_ticks(pid) != record.get("start_ticks")
