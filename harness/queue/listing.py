"""Reading the queue without changing it: one listing of the leases dir, and each unit's state.

Apart from `leases` because readers (status displays, the lease CLI) need only this, and a listing
is a proposal, never a decision: on NFS it can be stale, so claims still go through the atomic
`rename` (`harness.queue.leases`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.queue import reaper
from harness.queue.units import Unit

DONE = ".done"
ERRORED_ATTEMPT = (
    ".crash."  # `<key>.crash.<n>`: the n-th errored attempt (the file name is kept for old runs)
)


@dataclass
class Listing:
    """One readdir of the leases dir, parsed."""

    leased: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    errored_attempts: dict[str, int] = field(default_factory=dict)
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
        elif ERRORED_ATTEMPT in name:
            key, _, n = name.rpartition(ERRORED_ATTEMPT)
            if n.isdigit():
                listing.errored_attempts[key] = max(listing.errored_attempts.get(key, 0), int(n))
        else:
            present.add(name)
    listing.leased = present - listing.done
    return listing


@dataclass
class UnitState:
    """One unit as the status display shows it."""

    key: str
    unit: Unit
    state: str  # done, leased, pending, quarantined
    owner: dict[str, Any] | None = None
    heartbeat_age: float | None = None  # seconds since the owner's last heartbeat (server clock)
    stale: str | None = None  # why the reaper would reclaim it, if it would
    errored_attempts: int = 0
    last_error: str | None = None


def snapshot(root: Path, units: list[Unit], ttl_s: float, skew_s: float, crash_limit: int) -> list[UnitState]:
    """Every unit's state in the queue at `root`. Changes nothing in the queue: it only creates and
    removes a clock probe of its own (and uses the local clock if it cannot)."""
    listing = scan(root)
    now = reaper.ServerClock(root).now()
    judge = reaper.Judge(ttl_s, skew_s)
    states = []
    for unit in units:
        key = unit.key
        state = UnitState(key, unit, "pending", errored_attempts=listing.errored_attempts.get(key, 0))
        if state.errored_attempts:
            state.last_error = _read_text(root / f"{key}{ERRORED_ATTEMPT}{state.errored_attempts}")
        if key in listing.done:
            state.state = "done"
        elif state.errored_attempts >= crash_limit:
            state.state = "quarantined"
        elif key in listing.leased and (view := reaper.inspect(root, key, now)) is not None:
            state.state = "done" if view.done else "quarantined" if view.quarantined else "leased"
            if state.state == "leased":
                state.owner, state.heartbeat_age, state.stale = view.owner, view.age, judge.reason(view)
        states.append(state)
    return states


def _read_text(path: Path) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None
