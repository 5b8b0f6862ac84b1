"""Finding dead leases and reclaiming them, race-free, on a filesystem that lies about stat.

Staleness is judged on the filesystem server's clock: `utime(probe, None)` stamps the server's time on
a probe file and `open()` + `fstat` reads it back fresh, the same way the heartbeat's mtime is read
(a plain stat on NFS can be 20 s stale). Both sides being server-set, node clock skew cancels; a
tolerance (LEASE_SKEW_S) covers filesystems that stamp client time instead.

Reclaiming is two atomic renames. First the reaper renames the owner file `owner.<gen>.<n>` (which
the owner renames to n+1 at every heartbeat) to `reaped.<gen>.<token>`: that name is exactly what
the owner renames at its next beat, so of all reapers and the owner exactly one wins, and a slow
owner learns at its next beat that it lost the lease (fencing). Only the winner then renames the
lease dir to a unique tombstone, checks that the tombstone holds its own `reaped.*` mark (else it
moved a newer lease, and puts it back) and deletes it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.queue import owner as owners
from harness.queue import slurmjob

TOMB_PREFIX = ".tomb."
PROBE_PREFIX = ".probe."


def lost_errno(exc: OSError) -> bool:
    """ENOENT: our name was renamed away; ESTALE: our directory was removed (NFS)."""
    return exc.errno in (errno.ENOENT, errno.ESTALE)


class ServerClock:
    """The filesystem server's "now", read through a probe file that lives only for the reading."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def now(self) -> float:
        path = self.root / f"{PROBE_PREFIX}{socket.gethostname()}.{os.getpid()}"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return time.time()  # cannot write the queue dir (a read-only viewer): the local clock
        try:
            os.utime(path, None)
            return os.fstat(fd).st_mtime
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)


@dataclass
class LeaseView:
    """What one look into a lease dir showed."""

    key: str
    owner: dict[str, Any] | None  # the owner record (None before the claimant wrote it)
    beat: str | None  # the owner file's current name, `owner.<gen>.<n>`
    mtime: float  # server time of the last heartbeat (of the dir, before the owner file exists)
    age: float
    done: bool = False  # an empty dir whose unit is done (the owner file became `<key>.done`)


def inspect(root: Path, key: str, now: float) -> LeaseView | None:
    """The lease's owner and heartbeat age; None if the lease is gone (released or reaped)."""
    path = root / key
    try:
        beats = [n for n in os.listdir(path) if n.startswith("owner.")]
        beat = max(beats, key=lambda n: int(n.rsplit(".", 1)[1])) if beats else None
        fd = os.open(path / beat if beat else path, os.O_RDONLY)
        try:
            mtime = os.fstat(fd).st_mtime
            record = _parse(os.read(fd, 1 << 16)) if beat else None
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None  # gone, or renamed by a heartbeat this instant (so: alive)
    done = beat is None and (root / f"{key}.done").exists()
    return LeaseView(key, record, beat, mtime, now - mtime, done)


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(data)
    except ValueError:
        return None  # being written right now
    return record if isinstance(record, dict) else None


class Judge:
    """Decides which leases are dead; asks Slurm at most once per job per judge."""

    def __init__(self, ttl: float, skew: float, job_alive: Callable[[str], bool | None] = slurmjob.job_alive):
        self.ttl, self.skew = ttl, skew
        self._job_alive = job_alive
        self._jobs: dict[str, bool | None] = {}
        self._own_job = os.environ.get("SLURM_JOB_ID", "")

    def reason(self, view: LeaseView) -> str | None:
        """Why this lease is dead, or None while it may still be alive (or finished)."""
        if view.done:
            return None
        if view.owner is not None and owners.dead_on_this_host(view.owner):
            return f"owner pid {view.owner.get('pid')} on this host is gone"
        job = str(view.owner.get("slurm_job_id", "")) if view.owner else ""
        if job and job != self._own_job:
            if job not in self._jobs:
                self._jobs[job] = self._job_alive(job)
            if self._jobs[job] is False:
                return f"owner's Slurm job {job} has ended"
        if view.age > self.ttl + self.skew:
            return f"no heartbeat for {view.age:.0f} s (LEASE_TTL={self.ttl:g})"
        return None


def reap(root: Path, view: LeaseView) -> bool:
    """Reclaim the lease `view` saw. True for exactly one of any number of concurrent reapers."""
    token = secrets.token_hex(6)
    path = root / view.key
    mark = None
    if view.beat is not None:
        generation = view.beat.split(".")[1]
        mark = f"reaped.{generation}.{token}"
        try:
            os.rename(path / view.beat, path / mark)  # the fence: owner and other reapers lose
        except OSError as exc:
            if lost_errno(exc):
                return False
            raise
    tomb = root / f"{TOMB_PREFIX}{view.key}.{token}"
    try:
        os.rename(path, tomb)
    except OSError as exc:
        if lost_errno(exc):
            return False
        raise
    if mark is not None and not (tomb / mark).exists():
        # We moved a newer lease than the one we fenced (it was reaped and re-claimed meanwhile).
        try:
            os.rename(tomb, path)
            return False
        except OSError:
            pass  # someone claimed again: that newer owner is fenced at its next beat; safe
    shutil.rmtree(tomb, ignore_errors=True)
    return True


def sweep_tombs(root: Path, names: list[str]) -> None:
    """Delete tombstones a reaper or releaser died before deleting."""
    for name in names:
        if name.startswith(TOMB_PREFIX):
            shutil.rmtree(root / name, ignore_errors=True)
