"""The filesystem lease queue: many workers on many nodes share one run dir and steal units from it.

On-disk layout, all under `<run>/queue.txt.leases/` (the unit keys come from `harness.units`):

    <key>/                 the unit's lease; claiming = `mkdir` of this dir (atomic, one winner).
                           It stays after the unit is done or quarantined, so that no later mkdir
                           can claim a finished unit, whatever a stale listing said.
      owner.<gen>.json     the owner record (host, boot id, pid, process start, worker, SLURM_JOB_ID,
                           claimed_at, generation), created exclusively, never rewritten
      hb.<gen>.<n>         the heartbeat: every HEARTBEAT_S the owner renames n -> n+1 and touches it
      done.<gen>           the owner's heartbeat, renamed when it finished the unit (the fence)
      quarantined.<gen>    the same, when the unit reached CRASH_LIMIT
      reaped.<gen>.<tok>   left by the reaper that won (for an instant, before the dir goes)
    <key>.done             the unit is finished (for listings; written after `done.<gen>`)
    <key>.crash.<n>        the n-th errored attempt of the unit (created exclusively; holds the error)
    <key>.quarantine       CRASH_LIMIT reached: skipped from now on (holds the last error, as JSON)
    .tomb.<key>.<tok>/     a released or reaped lease being deleted (transient)
    .probe.<host>.<pid>    a process's probe of the server clock (transient)

Every decision is the result of an atomic call (mkdir, rename, exclusive create): on NFS a stat or
exists can be wrong for tens of seconds. A listing only proposes candidates; the mkdir decides.
`<gen>` is fresh per claim, so no name is ever reused for another owner; see `harness.reaper` for
staleness, reclaiming and fencing. `rm -rf queue.txt.leases` recovers from any state: leases, done
marks, crash counts and quarantines go, and resume (records) tells again what is left to run.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import knobs, reaper
from harness.owner import owner_record
from harness.rundir import RunDir
from harness.units import Unit, run_units

DONE = ".done"
QUARANTINE = ".quarantine"
CRASH = ".crash."


def write_once(path: Path, text: str) -> bool:
    """Create `path` exclusively with `text`; False if it already exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return True


def _read_text(path: Path) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


class Lease:
    """A claimed unit: heartbeats from a background thread until finished or lost."""

    def __init__(self, root: Path, unit: Unit, generation: str) -> None:
        self.root, self.unit, self.generation = root, unit, generation
        self.path = root / unit.key
        self.lost = threading.Event()
        self._beat = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _beat_path(self, n: int) -> Path:
        return self.path / f"hb.{self.generation}.{n}"

    def start(self, interval: float) -> None:
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            if not self.beat():
                return

    def beat(self) -> bool:
        """Refresh the heartbeat; False once the lease is lost (the rename finds its name gone)."""
        with self._lock:
            if self.lost.is_set():
                return False
            try:
                os.rename(self._beat_path(self._beat), self._beat_path(self._beat + 1))
                self._beat += 1
                os.utime(self._beat_path(self._beat), None)
            except OSError as exc:
                if not reaper.lost_errno(exc):
                    return True  # a transient error: the next beat retries
                self.lost.set()
                return False
            return True

    def finish(self, final: str | None) -> bool:
        """Release the lease: `final` "done" or "quarantined" keeps the dir (no one claims the unit
        again), None deletes it (claimable again). False if the lease was lost first."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            if self.lost.is_set():
                return False
            try:  # the fence: once our heartbeat name is gone, no reaper can win any more
                os.rename(self._beat_path(self._beat), self.path / f"{final or 'released'}.{self.generation}")
            except OSError as exc:
                if reaper.lost_errno(exc):
                    self.lost.set()
                    return False
                raise
        if final is None:
            tomb = self.root / f"{reaper.TOMB_PREFIX}{self.unit.key}.{secrets.token_hex(6)}"
            os.rename(self.path, tomb)
            shutil.rmtree(tomb, ignore_errors=True)
        return True


@dataclass
class Listing:
    """One readdir of the leases dir, parsed."""

    leased: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    quarantined: set[str] = field(default_factory=set)
    crashes: dict[str, int] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)


def scan(root: Path) -> Listing:
    listing = Listing()
    try:
        listing.names = os.listdir(root)
    except FileNotFoundError:
        return listing
    present = set()
    for name in listing.names:
        if name.startswith("."):
            continue
        if name.endswith(DONE):
            listing.done.add(name[: -len(DONE)])
        elif name.endswith(QUARANTINE):
            listing.quarantined.add(name[: -len(QUARANTINE)])
        elif CRASH in name:
            key, _, n = name.rpartition(CRASH)
            if n.isdigit():
                listing.crashes[key] = max(listing.crashes.get(key, 0), int(n))
        else:
            present.add(name)
    listing.leased = present - listing.done - listing.quarantined
    return listing


class LeaseQueue:
    """One worker's view of the queue: claims in its own random order, remembers what is done."""

    def __init__(self, run: RunDir, units: list[Unit], worker_id: str, rng: random.Random | None = None):
        self.root = run.leases
        self.units = {unit.key: unit for unit in units}
        self.worker_id = worker_id
        self.ttl = knobs.get_float("LEASE_TTL")
        self.heartbeat_s = knobs.get_float("HEARTBEAT_S")
        self.crash_limit = knobs.get_int("CRASH_LIMIT")
        self.judge = reaper.Judge(self.ttl, knobs.get_float("LEASE_SKEW_S"))
        self.clock = reaper.ServerClock(self.root)
        self.rng = rng or random.Random(f"{worker_id}.{os.getpid()}.{time.time_ns()}")
        self.finished: set[str] = set()  # done or quarantined: never tried again
        self.crashes: dict[str, int] = {}
        self._candidates: list[str] = []
        self._leased: set[str] = set()
        self._misses = 0
        self._last_reap = time.monotonic()

    def claim(self, stop: threading.Event | None = None) -> Lease | None:
        """The next unit to work on, or None when every unit is done or quarantined (or `stop`)."""
        self.root.mkdir(parents=True, exist_ok=True)
        while stop is None or not stop.is_set():
            if not self._candidates or self._misses > 8:
                if not self._refresh():
                    return None
                if not self._candidates:
                    if not self.reap_pass():
                        time.sleep(min(self.heartbeat_s, 2.0))
                    continue
            elif time.monotonic() - self._last_reap > self.ttl / 2:
                self.reap_pass()
            key = self._candidates.pop()
            lease = self._try(key)
            if lease is not None:
                return lease
        return None

    def _refresh(self) -> bool:
        """Re-list the queue; False when nothing is left to do."""
        listing = scan(self.root)
        reaper.sweep_tombs(self.root, listing.names)
        self.finished |= (listing.done | listing.quarantined) & self.units.keys()
        self.crashes.update(listing.crashes)
        self._leased = listing.leased & self.units.keys()
        pending = [key for key in self.units if key not in self.finished]
        self._candidates = [key for key in pending if key not in self._leased]
        self.rng.shuffle(self._candidates)
        self._misses = 0
        return bool(pending)

    def _try(self, key: str) -> Lease | None:
        path = self.root / key
        try:
            os.mkdir(path)
        except FileExistsError:
            self._misses += 1
            return None
        self._misses = 0
        generation = secrets.token_hex(6)
        write_once(path / f"owner.{generation}.json", json.dumps(owner_record(self.worker_id, generation)))
        write_once(path / f"hb.{generation}.0", "")
        lease = Lease(self.root, self.units[key], generation)
        lease.start(self.heartbeat_s)
        return lease

    def reap_pass(self) -> list[str]:
        """Reclaim every dead lease among those last listed; the keys this worker reclaimed."""
        self._last_reap = time.monotonic()
        now = self.clock.now()
        reaped = []
        for key in sorted(self._leased):
            view = reaper.inspect(self.root, key, now)
            if view is None:
                self._candidates.append(key)  # released meanwhile: worth a try
            elif view.final is not None:  # its owner died between the fence and the marker
                if view.final == "done":
                    write_once(self.root / f"{key}{DONE}", "")
                self.finished.add(key)
            elif self.judge.reason(view) is not None and reaper.reap(self.root, view):
                reaped.append(key)
                self._candidates.append(key)
        self._leased -= set(self._candidates)
        return reaped

    def mark(self, lease: Lease, done: bool) -> bool:
        """Release `lease`, as done or not. False if the lease was lost: then nothing is marked."""
        if not lease.finish("done" if done else None):
            return False
        if done:
            write_once(self.root / f"{lease.unit.key}{DONE}", "")
            self.finished.add(lease.unit.key)
        return True

    def release_errored(self, lease: Lease, error: str) -> bool:
        """Count one errored attempt of the unit and release it; at CRASH_LIMIT it is quarantined
        (its dir kept, so never claimed again). True if quarantined."""
        unit = lease.unit
        n = self.crashes.get(unit.key, 0) + 1
        while not write_once(self.root / f"{unit.key}{CRASH}{n}", error):
            n += 1
        self.crashes[unit.key] = n
        if n < self.crash_limit:
            lease.finish(None)
            return False
        info = {"error": error, "crashes": n, "worker": self.worker_id, "at": time.time()}
        write_once(self.root / f"{unit.key}{QUARANTINE}", json.dumps(info))
        self.finished.add(unit.key)
        lease.finish("quarantined")
        return True



@dataclass
class UnitState:
    """One unit as the status display shows it."""

    key: str
    unit: Unit
    state: str  # done, leased, pending, quarantined
    owner: dict[str, Any] | None = None
    heartbeat_age: float | None = None
    stale: str | None = None  # why the reaper would reclaim it, if it would
    crashes: int = 0
    last_error: str | None = None


def snapshot(run_dir: Path | RunDir, units: list[Unit] | None = None) -> list[UnitState]:
    """Every unit's queue state (units default: from the run's plan). Changes nothing in the queue:
    it only creates and removes a clock probe of its own (the local clock if it cannot)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    units = run_units(run) if units is None else units
    listing = scan(run.leases)
    now = reaper.ServerClock(run.leases).now()
    judge = reaper.Judge(knobs.get_float("LEASE_TTL"), knobs.get_float("LEASE_SKEW_S"))
    states = []
    for unit in units:
        key = unit.key
        crashes = listing.crashes.get(key, 0)
        state = UnitState(key, unit, "pending", crashes=crashes)
        if crashes:
            state.last_error = _read_text(run.leases / f"{key}{CRASH}{crashes}")
        if key in listing.quarantined:
            state.state = "quarantined"
            state.last_error = _quarantine_error(run.leases / f"{key}{QUARANTINE}") or state.last_error
        elif key in listing.done:
            state.state = "done"
        elif key in listing.leased and (view := reaper.inspect(run.leases, key, now)) is not None:
            if view.final is not None:
                state.state = "done" if view.final == "done" else "quarantined"
                states.append(state)
                continue
            state.state, state.owner, state.heartbeat_age = "leased", view.owner, view.age
            state.stale = judge.reason(view)
        states.append(state)
    return states


def _quarantine_error(path: Path) -> str | None:
    try:
        return str(json.loads(_read_text(path) or "")["error"])
    except (ValueError, KeyError, TypeError):
        return None
