"""Finding dead leases and reclaiming them, race-free, on a filesystem that lies about stat.

Staleness is judged on the filesystem server's clock: `utime(probe, None)` stamps the server's time on
a probe file and `open()` + `fstat` reads it back fresh, the same way the heartbeat's mtime is read
(a plain stat on NFS can be 20 s stale). Both sides being server-set, node clock skew cancels; a
tolerance (LEASE_SKEW_S) covers filesystems that stamp client time instead.

Reclaiming is two atomic renames. First the reaper renames the owner file `owner.<gen>.<n>` (which
the owner renames to n+1 at every heartbeat) to `reaped.<gen>.<token>` and touches it: that name is
exactly what the owner renames at its next beat, so of all reapers and the owner exactly one wins,
and a slow owner learns at its next beat that it lost the lease (fencing). Only the winner then
renames the lease dir to a unique tombstone and deletes it. No decision reads `exists` or `stat` of
a path (on NFS both can be wrong for ~45 s): a lease dir is never empty, so no claim can land in it
between the two renames, and a reaper that died between them leaves a mark that ages like a
heartbeat and is reaped in turn. A finished or quarantined unit's owner file has been renamed
(`done.<gen>`, `quarantined.<gen>`), so no reaper's rename can win on it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
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
CLAIM_PREFIX = ".claim."  # + <host>.<pid namespace>.<pid>.<gen>: a claim being prepared
PROBE_PREFIX = ".probe."  # + <host>.<pid namespace>.<pid>: a clock probe


def lost_errno(exc: OSError) -> bool:
    """ENOENT: our name was renamed away; ESTALE: our directory was removed (NFS)."""
    return exc.errno in (errno.ENOENT, errno.ESTALE)


class ServerClock:
    """The filesystem server's "now", read through a probe file that lives only for the reading."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def now(self) -> float:
        path = self.root / f"{PROBE_PREFIX}{socket.gethostname()}.{owners.namespace_tag()}.{os.getpid()}"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return time.time()  # cannot write the queue dir (a read-only viewer): the local clock
        try:
            os.utime(fd, None)  # by fd: a sweeper that unlinked the name meanwhile costs nothing
            return os.fstat(fd).st_mtime
        except OSError as exc:  # on NFS, ESTALE: another client removed the probe after our open
            if not lost_errno(exc):
                raise
            return time.time()
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)


@dataclass
class LeaseView:
    """What one look into a lease dir showed."""

    key: str
    owner: dict[str, Any] | None  # the owner record (None for a reaper's or releaser's mark)
    beat: str  # the file a reaper renames: `owner.<gen>.<n>`, or a dead reaper's `reaped.*` mark
    mtime: float  # server time of its last heartbeat (or of the mark)
    age: float
    generation: str
    done: bool = False  # the owner file became `done.<gen>`
    quarantined: bool = False  # the owner file became `quarantined.<gen>`


def inspect(root: Path, key: str, now: float) -> LeaseView | None:
    """The lease's owner and heartbeat age; None if the lease is gone (released, reaped, or an
    empty dir, which only an older layout of the queue leaves and a claim may take)."""
    path = root / key
    try:
        names = os.listdir(path)
        for state in ("done", "quarantined"):
            found = [n for n in names if n.startswith(f"{state}.")]
            if found:
                return LeaseView(key, None, found[0], 0.0, 0.0, found[0].split(".")[1], **{state: True})
        beats = [n for n in names if n.startswith("owner.")]
        marks = [n for n in names if n.startswith(("reaped.", "released."))]
        if not beats and not marks:
            return None
        beat = max(beats, key=lambda n: int(n.rsplit(".", 1)[1])) if beats else marks[0]
        fd = os.open(path / beat, os.O_RDONLY)
        try:
            mtime = os.fstat(fd).st_mtime
            record = _parse(os.read(fd, 1 << 16)) if beats else None
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None  # gone, or renamed by a heartbeat this instant (so: alive)
    return LeaseView(key, record, beat, mtime, now - mtime, beat.split(".")[1])


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(data)
    except ValueError:
        return None  # being written right now
    return record if isinstance(record, dict) else None


JOB_RECHECK_S = 30.0  # how long Slurm's answer about a job is trusted before it is asked again


class Judge:
    """Decides which leases are dead; asks Slurm about a job again once JOB_RECHECK_S has passed
    (every job is alive when first seen: only a re-ask sees it end)."""

    def __init__(
        self,
        ttl: float,
        skew: float,
        job_alive: Callable[[str], bool | None] = slurmjob.job_alive,
        recheck_s: float = JOB_RECHECK_S,
    ) -> None:
        self.ttl, self.skew, self.recheck_s = ttl, skew, recheck_s
        self._job_alive = job_alive
        self._jobs: dict[str, tuple[float, bool | None]] = {}
        self._own_job = os.environ.get("SLURM_JOB_ID", "")

    def job_alive(self, job: str) -> bool | None:
        asked = self._jobs.get(job)
        if asked is None or time.monotonic() - asked[0] > self.recheck_s:
            asked = (time.monotonic(), self._job_alive(job))
            self._jobs[job] = asked
        return asked[1]

    def reason(self, view: LeaseView) -> str | None:
        """Why this lease is dead, or None while it may still be alive (or finished)."""
        if view.done or view.quarantined:
            return None
        if view.owner is not None and owners.dead_on_this_host(view.owner):
            return f"owner pid {view.owner.get('pid')} on this host is gone"
        job = str(view.owner.get("slurm_job_id", "")) if view.owner else ""
        if job and job != self._own_job and self.job_alive(job) is False:
            return f"owner's Slurm job {job} has ended"
        if view.age > self.ttl + self.skew:
            return f"no heartbeat for {view.age:.0f} s (LEASE_TTL={self.ttl:g})"
        return None


def owner_text(owner: dict[str, Any] | None) -> str:
    """Who held a lease, for a log line: its writer, host and pid as its owner record says."""
    if not owner:
        return "a reaper or releaser that died mid-way"
    return f"worker={owner.get('worker', '?')} host={owner.get('host', '?')} pid={owner.get('pid', '?')}"


def reap(root: Path, view: LeaseView) -> bool:
    """Reclaim the lease `view` saw. True for exactly one of any number of concurrent reapers."""
    path = root / view.key
    mark = path / f"reaped.{view.generation}.{secrets.token_hex(6)}"
    try:
        os.rename(path / view.beat, mark)  # the fence: the owner and other reapers lose
        os.utime(mark, None)  # a fresh mark: no other reaper takes it while we finish
    except OSError as exc:
        if lost_errno(exc):
            return False
        raise
    return bury(root, path, view.key)


def bury(root: Path, path: Path, key: str) -> bool:
    """Rename a fenced lease dir to a unique tombstone and delete it; False if it was gone."""
    tomb = root / f"{TOMB_PREFIX}{key}.{secrets.token_hex(6)}"
    try:
        os.rename(path, tomb)
    except OSError as exc:
        if lost_errno(exc):
            return False
        raise
    shutil.rmtree(tomb, ignore_errors=True)
    return True


def sweep_tombs(root: Path, names: list[str], max_age_s: float = math.inf) -> None:
    """Delete tombstones a reaper or releaser died before deleting, and the staged claims and clock
    probes of processes that are gone (a SIGKILL leaves them).

    A claim or probe is named for its host, PID namespace and pid. Of this host and PID namespace it
    is gone when its pid is; of any other (a container beside us on this host, another host) the pid
    says nothing here, so it is gone only once older than `max_age_s` on the server's clock: a live
    claim is re-stamped every heartbeat while it is tried, a probe lives for one reading.
    """
    now: float | None = None
    for name in names:
        if name.startswith(TOMB_PREFIX):
            shutil.rmtree(root / name, ignore_errors=True)
            continue
        if name.startswith(CLAIM_PREFIX):
            *maker, generation = _maker(name[len(CLAIM_PREFIX) :], 4)
            stamp = root / name / f"owner.{generation}.0"
        elif name.startswith(PROBE_PREFIX):
            maker, stamp = _maker(name[len(PROBE_PREFIX) :], 3), root / name
        else:
            continue
        gone = owners.pid_gone_here(*maker)
        if gone is None and max_age_s < math.inf:
            now = ServerClock(root).now() if now is None else now
            gone = now - _mtime(stamp, root / name) > max_age_s
        if not gone:
            continue
        with contextlib.suppress(OSError):  # a sweep is best effort: the next listing tries again
            if name.startswith(CLAIM_PREFIX):
                bury(root, root / name, name)  # renamed first: a claim its owner takes meanwhile stays whole
            else:
                os.unlink(root / name)


def _maker(rest: str, parts: int) -> list[str]:
    """`<host>.<namespace>.<pid>[.<gen>]` split into `parts` fields (a host may hold dots); a name
    of another layout gets fields that match no host, so only its age judges it."""
    fields = rest.rsplit(".", parts - 1)
    return fields if len(fields) == parts else ["", "", "", ""][:parts]


def _mtime(*paths: Path) -> float:
    """The server mtime of the first of `paths` that exists, read fresh (open + fstat); +inf if none
    does (gone meanwhile: nothing to sweep). On NFS a file another client removes after our open
    fails the fstat itself, with ESTALE: gone too."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            return os.fstat(fd).st_mtime
        except OSError as exc:
            if not lost_errno(exc):
                raise
        finally:
            os.close(fd)
    return math.inf
