"""The filesystem lease queue: many workers on many nodes share one run dir and steal units from it.

On-disk layout, all under `<run>/queue.txt.leases/` (unit keys come from `harness.queue.units`;
a held lease is `harness.queue.lease`):

    <key>/                 the unit's lease. Claiming = one `rename` of a private dir that already
                           holds the owner file onto this name: it succeeds only if no lease dir is
                           there (a lease dir is never empty), so success alone makes the owner.
      owner.<gen>.<n>      the owner record (JSON: host, boot id, pid namespace, pid, process start
                           time, worker, SLURM_JOB_ID, claimed_at, generation), written once before
                           the claim. It is the heartbeat too: every HEARTBEAT_S the owner renames
                           it n -> n+1 and touches it; its content is never rewritten.
      done.<gen>           the unit is finished: the owner file, renamed by its owner. The dir
                           stays, so no later claim can succeed on a finished unit.
      quarantined.<gen>    the unit reached CRASH_LIMIT errored attempts: the owner file, renamed by
                           its owner; the dir stays, so no claim succeeds until `leasectl requeue`.
      reaped.<gen>.<tok>   the owner file, renamed by the reaper that won (for an instant)
      released.<gen>       the owner file, renamed by its owner releasing the unit (for an instant)
    <key>.done             a hint for listings that `<key>/done.<gen>` exists (created after it)
    <key>.crash.<n>        the n-th errored attempt (created exclusively; holds the error). A unit
                           with CRASH_LIMIT of them is quarantined: reported and never claimed again.
    .claim.<host>.<ns>.<pid>.<gen>/  a worker's next claim, owner file inside, waiting to be renamed
                           (<ns>: the PID namespace's inode, so a pid is judged only in its own)
    .tomb.<key>.<tok>/     a released or reaped lease dir being deleted (transient)
    .probe.<host>.<ns>.<pid>  a process's probe of the server clock (transient)

Every decision is the result of an atomic call (rename, exclusive create): on NFS a stat or exists
can be wrong for tens of seconds. A listing only proposes candidates; the claim's rename decides.
`<gen>` is fresh per claim, so no name is ever reused for another owner; `harness.queue.reaper` says how
staleness is judged and how reclaiming and fencing work. `rm -rf queue.txt.leases` recovers from
any state: leases, done marks, errored attempts and quarantines go, and resume (the records) tells
again what is left to run.
"""

from __future__ import annotations

import errno
import json
import os
import random
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.queue import reaper
from harness.queue.beacon import Beacon
from harness.queue.lease import Heartbeat, Lease, write_once
from harness.queue.listing import DONE, ERRORED_ATTEMPT, scan
from harness.queue.owner import namespace_tag, owner_record
from harness.queue.units import Unit

IDLE_S = 0.25  # first wait when every pending unit is leased; doubles up to HEARTBEAT_S
# (cut short when a worker on this node finishes or releases a unit: harness.queue.beacon)
MAX_MISSES = 8  # failed claims in a row before the candidate list is re-listed
DEMOTE_AFTER = 3  # failed claims in a row before the rest of that band goes below the next band


@dataclass(frozen=True)
class QueueSettings:
    """How the queue judges and retries: the LEASE_TTL, HEARTBEAT_S, LEASE_SKEW_S and CRASH_LIMIT knobs."""

    ttl_s: float
    heartbeat_s: float
    skew_s: float
    crash_limit: int
    prefix_first: bool = False  # EVAL_STOP is adaptive: every cell's first seeds before later ones


class LeaseQueue:
    """One worker's view of the queue: claims the longest units first (lowest slices first in an
    adaptive run), in its own random order among equals, and remembers what is finished, so a claim
    costs one rename, not a scan of every lease (O(units) traffic on NFS)."""

    def __init__(
        self,
        root: Path,
        units: list[Unit],
        worker_id: str,
        settings: QueueSettings,
        rng: random.Random | None = None,
    ) -> None:
        self.root = root
        self.units = {unit.key: unit for unit in units}
        self.worker_id = worker_id
        self.ttl = settings.ttl_s
        self.crash_limit = settings.crash_limit
        self.prefix_first = settings.prefix_first
        self.heartbeat = Heartbeat(settings.heartbeat_s)
        self.judge = reaper.Judge(self.ttl, settings.skew_s)
        self.clock = reaper.ServerClock(self.root)
        self.beacon = Beacon(self.root)
        self.rng = rng or random.Random(f"{worker_id}.{os.getpid()}.{time.time_ns()}")
        self.finished: set[str] = set()  # done or quarantined: never tried again
        self.errored_attempts: dict[str, int] = {}
        self._candidates: list[str] = []
        self._leased: set[str] = set()
        self._misses = 0
        self._last_reap = time.monotonic()
        self.reaped: list[str] = []  # what this worker reclaimed, one line each, for its caller's log
        self._idle_s = IDLE_S
        self._woken = False  # the last idle wait ended on the beacon
        self._staged: tuple[Path, str] | None = None  # the next claim: its private dir, its generation
        self._stamped = 0.0  # when the staged owner file's mtime (its first heartbeat) was set
        self.root.mkdir(parents=True, exist_ok=True)

    def claim(
        self,
        stop: threading.Event | None = None,
        prefer: Callable[[Unit], bool] | None = None,
        skip: Callable[[Unit], bool] | None = None,
        shortest: bool = False,
    ) -> Lease | None:
        """The next unit to work on, or None when every unit is done, quarantined or skipped (or `stop`).
        Candidates that `prefer` accepts (a unit whose env the caller already keeps) are tried
        first; the others follow at once: a preference orders the claims, it never waits. A
        candidate that `skip` accepts (its cell was decided early) is never claimed, and counts as
        finished for this queue; `skip` is asked just before each claim attempt. `shortest` takes
        the cheapest unit instead of the longest (a worker's first claim: its first result soonest)."""
        while stop is None or not stop.is_set():
            if not self._candidates or self._misses > MAX_MISSES:
                if not self.refresh():
                    self.close()
                    return None
                if not self._candidates:
                    # A sibling's ring says a unit was finished or released, not that a lease died:
                    # list, but reap (O(leases) on the server) only when the back-off ran out
                    if self._woken or not self.reap_pass():
                        self.close()  # no staged claim ages while idle: its age says its owner lives
                        self._woken = self.beacon.wait(self._idle_s)
                        self._idle_s = min(self._idle_s * 2, self.heartbeat.interval)
                    continue
            elif time.monotonic() - self._last_reap > self.ttl / 2:
                self.reap_pass()
            key = self._next_candidate(prefer, shortest and not self.prefix_first)
            if skip is not None and skip(self.units[key]):
                self.finished.add(key)
                continue
            lease = self._try(key)
            if lease is not None:
                self._idle_s, self._woken = IDLE_S, False
                return lease
            if self._misses == DEMOTE_AFTER:
                self._demote(key)
        self.close()
        return None

    def _next_candidate(self, prefer: Callable[[Unit], bool] | None, shortest: bool = False) -> str:
        """Take the last preferred candidate (the list is shuffled), else the last one; `shortest`:
        the cheapest, its cell's lowest slice (the first in the shuffle among equals), or after a
        miss any unit of the cheapest rank (the first in the list): a pool that starts together
        wants the same cheapest units, and walking them in the same order is a miss per worker
        ahead, and a listing per MAX_MISSES of them."""
        if shortest and self._misses:
            return self._candidates.pop(0)
        if shortest:
            cheapest = min(
                range(len(self._candidates)),
                key=lambda i: (self.units[self._candidates[i]].cost_s, self.units[self._candidates[i]].lo),
            )
            return self._candidates.pop(cheapest)
        if prefer is not None:
            for index in range(len(self._candidates) - 1, -1, -1):
                if prefer(self.units[self._candidates[index]]):
                    return self._candidates.pop(index)
        return self._candidates.pop()

    def quarantined(self, key: str) -> bool:
        return self.errored_attempts.get(key, 0) >= self.crash_limit

    def refresh(self) -> bool:
        """Re-list the queue; False when nothing is left to do."""
        listing = scan(self.root)
        reaper.sweep_tombs(self.root, listing.names, max_age_s=self.ttl + self.judge.skew)
        self.errored_attempts.update(listing.errored_attempts)
        self.finished |= listing.done & self.units.keys()
        self.finished |= {key for key in self.units if self.quarantined(key)}
        self._leased = listing.leased & self.units.keys()
        pending = [key for key in self.units if key not in self.finished]
        self._candidates = [key for key in pending if key not in self._leased]
        self.rng.shuffle(self._candidates)
        # `claim` pops from the end. An adaptive run stops a cell at a prefix of its seeds, so every
        # cell's first slices go before any cell's later ones; otherwise the longest units go first
        # (the tail stays short). Shuffled among equals, and nothing finer: every worker sorts alike,
        # so a key that leaves few units tied (a cell's slice index was one: issue 62) sends them all
        # to the same units, which others took since this listing; each try is then a miss and
        # MAX_MISSES of them a listing, O(units) on the server.
        self._candidates.sort(key=self._band)
        self._misses = 0
        return bool(pending)

    def _band(self, key: str) -> tuple[int, ...]:
        """A candidate's place in the claim order, higher first; equals stay in the shuffle's order."""
        unit = self.units[key]
        return (-unit.lo, unit.rank) if self.prefix_first else (unit.rank,)

    def _demote(self, missed: str) -> None:
        """Move the rest of `missed`'s band just below the next band. Every worker works through
        the bands in the same order, so a band's last units go fast and a listing's leftovers of it
        are taken: DEMOTE_AFTER misses in a row say so, and the next band, which the pool has
        barely begun, is fresh. Without this each worker tried MAX_MISSES of them and listed the
        queue again at every band's end. A leftover still free is tried after the next band, or
        first by any worker that lists (the band is then on top again)."""
        band = self._band(missed)
        if not self._candidates or self._band(self._candidates[0]) >= band:
            return  # the lowest band (the list starts with it): nothing to go below
        orders = {key: self._band(key) for key in self._candidates}
        rest = [key for key in self._candidates if orders[key] != band]
        following = max(orders[key] for key in rest if orders[key] < band)
        at = next(i for i, key in enumerate(rest) if orders[key] == following)  # `claim` pops from the end
        self._candidates = rest[:at] + [key for key in self._candidates if orders[key] == band] + rest[at:]

    def _try(self, key: str) -> Lease | None:
        """One claim attempt: rename the staged dir (owner file inside) onto the lease name."""
        stage, generation = self._stage()
        try:
            if time.monotonic() - self._stamped > self.heartbeat.interval:  # a fresh heartbeat to claim with
                os.utime(stage / f"owner.{generation}.0", None)
                self._stamped = time.monotonic()
            os.rename(stage, self.root / key)
        except OSError as exc:
            if reaper.lost_errno(exc):  # a sweeper judged the staged claim dead: stage a new one
                self._staged = None
                return None
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
                raise
            self._misses += 1
            return None
        self._staged, self._misses = None, 0
        lease = Lease(self.root, self.units[key], generation)
        self.heartbeat.add(lease)
        return lease

    def _stage(self) -> tuple[Path, str]:
        """The private dir of the next claim, its owner file written; reused across missed tries."""
        while self._staged is None:
            generation = secrets.token_hex(6)
            maker = f"{socket.gethostname()}.{namespace_tag()}.{os.getpid()}"
            stage = self.root / f"{reaper.CLAIM_PREFIX}{maker}.{generation}"
            os.mkdir(stage)
            record = json.dumps(owner_record(self.worker_id, generation))
            try:
                write_once(stage / f"owner.{generation}.0", record)
            except OSError as exc:
                if not reaper.lost_errno(exc):
                    raise
                continue  # swept while this process stalled here: stage anew
            self._staged, self._stamped = (stage, generation), time.monotonic()
        return self._staged

    def close(self) -> None:
        """Remove the staged claim dir (the next worker on this host would sweep it anyway)."""
        if self._staged is not None:
            shutil.rmtree(self._staged[0], ignore_errors=True)
            self._staged = None

    def reap_pass(self) -> list[str]:
        """Reclaim every dead lease among those last listed; the keys this worker reclaimed."""
        self._last_reap = time.monotonic()
        self.reaped: list[str] = []  # what this worker reclaimed, one line each, for its caller's log
        now = self.clock.now()
        reaped = []
        for key in sorted(self._leased):
            view = reaper.inspect(self.root, key, now)
            if view is None:
                self._candidates.append(key)  # released meanwhile: worth a try
            elif view.done or view.quarantined:
                self.finished.add(key)
                if view.done:  # its owner died before writing the listing's hint: write it for it
                    write_once(self.root / f"{key}{DONE}", view.generation)
            elif (reason := self.judge.reason(view)) is not None and reaper.reap(self.root, view):
                reaped.append(key)
                self.reaped.append(f"reaped unit={key} from {reaper.owner_text(view.owner)}: {reason}")
                self._candidates.append(key)
        self._leased -= set(self._candidates) | self.finished
        return reaped

    def mark(self, lease: Lease, done: bool) -> bool:
        """Release `lease`, as done or not. False if the lease was lost: then nothing is marked."""
        self.heartbeat.discard(lease)
        ok = lease.finish(done)
        if ok and done:
            self.finished.add(lease.unit.key)
        self.beacon.ring()
        return ok

    def release_errored(self, lease: Lease, error: str) -> bool:
        """Count one errored attempt of the unit and release it; True if that reached CRASH_LIMIT
        (the unit is quarantined: never claimed again)."""
        key = lease.unit.key
        n = self.errored_attempts.get(key, 0) + 1
        while not write_once(self.root / f"{key}{ERRORED_ATTEMPT}{n}", error):
            n += 1
        self.errored_attempts[key] = n
        self.heartbeat.discard(lease)
        if self.quarantined(key):
            lease.quarantine()  # the dir stays: a claim from a stale listing cannot succeed
            self.finished.add(key)
        else:
            lease.finish(done=False)
        self.beacon.ring()
        return self.quarantined(key)
