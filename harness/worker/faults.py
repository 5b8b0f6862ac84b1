"""Why an attempt at a unit failed, and the worker's breaker for failures that are not the unit's.

Every failed attempt has a cause (DESIGN.md, round 3): the **unit** itself (an episode that crashes,
hangs or runs out of time), the **model server** (it died, stopped answering its health check,
could not be reached, refused the pairing or was lost mid-unit), the **node** (the benchmark or its
renderer cannot start here), or **cancelled** (the worker was told to stop, or lost the lease).
Only unit faults count towards the unit's CRASH_LIMIT: a broken node or a server outage would
otherwise fail every unit in seconds and quarantine innocent units across the whole run. Instead a
worker whose attempts fail WORKER_FAULT_LIMIT times in a row for a model server or node cause stops
itself (`Breaker`; the worker exits 1 with its leases released) and says why.

The sim process's exit statuses (harness/episode/simserver.py; the worker stage does not import
the sim's code, so they are mirrored here and a test checks they agree) say which it was.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from harness.worker.external_server import ExternalServer
from harness.worker.model_server_process import ModelServerProcess
from harness.worker.sim_process import SimOutcome

UNIT, MODEL_SERVER, NODE, CANCELLED = "unit", "model server", "node", "cancelled"
# harness.episode.simserver: CANNOT_START (no model server, a refused pairing, bad arguments),
# LOST_SERVER (the connection was lost mid-unit), NO_BENCHMARK (benchmark or renderer cannot start)
CANNOT_START, LOST_SERVER, NO_BENCHMARK = 2, 3, 4


@dataclass(frozen=True)
class Fault:
    """What ended an attempt: its cause (UNIT, MODEL_SERVER, NODE or CANCELLED) and what happened."""

    cause: str
    why: str

    def __str__(self) -> str:
        return f"{self.cause}: {self.why}"


def classify(outcome: SimOutcome, server_down: str | None) -> Fault | None:
    """The fault of one sim assignment, None when the assignment ran to its end (its episodes may still have
    errored: that is the unit's, judged from the records). `server_down` says why the model server
    cannot serve now (None while it can): a stall while it does not answer is the server's."""
    said = f": {outcome.said}" if outcome.said else ""
    if outcome.killed == "cancelled":
        return Fault(CANCELLED, "the worker stopped the sim client")
    if outcome.killed == "model server died":
        return Fault(MODEL_SERVER, f"the sim client was killed: {server_down or 'the model server is gone'}")
    if outcome.killed == "stalled" and server_down is not None:
        return Fault(MODEL_SERVER, f"the episode stalled while the model server was down ({server_down})")
    if outcome.killed is not None:
        return Fault(UNIT, outcome.killed)  # stalled, unit timeout
    code = outcome.returncode
    if code == 0:
        return None
    if code == CANNOT_START:
        return Fault(MODEL_SERVER, f"the sim client could not reach or pair with it (exit {code}){said}")
    if code == LOST_SERVER:
        return Fault(MODEL_SERVER, f"the sim client lost the model server mid-unit (exit {code}){said}")
    if code == NO_BENCHMARK:
        return Fault(NODE, f"the benchmark or its renderer cannot start on this node (exit {code}){said}")
    return Fault(UNIT, f"sim client exited with {code}{said}")


def of_attempt(fault: Fault | None, errored: int, server_died: bool) -> Fault:
    """The fault of a failed attempt: its assignments' (a unit fault when they ran but `errored` seeds have
    no trial), or the model server's when it died or was restarted meanwhile."""
    fault = fault or Fault(UNIT, f"{errored} seeds errored")
    if server_died and fault.cause != NODE:
        return Fault(MODEL_SERVER, f"the model server died during the unit ({fault.why})")
    return fault


def server_down(server: ModelServerProcess | ExternalServer) -> str | None:
    """Why the worker's model server cannot serve now (None while it can)."""
    if isinstance(server, ModelServerProcess) and server.stopped():
        return "its process is stopped (SIGSTOP): it answers nothing"
    if server.alive():
        return None
    return server.trouble if isinstance(server, ExternalServer) else "its process is gone"


class BreakerTripped(Exception):
    """A worker's attempts kept failing for a cause that is not their units': it stops (exit 1)."""


class Breaker:
    """Counts a worker's attempts that failed in a row for a model server or node cause (its slots
    together); at `limit` of them `record` raises BreakerTripped naming the last cause."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.streak = 0
        self._lock = threading.Lock()

    def record(self, fault: Fault | None) -> None:
        """One attempt's end. A unit that ran (None) or failed by itself (a unit fault) shows the
        node and server work: the streak restarts. A cancelled attempt says nothing either way."""
        with self._lock:
            if fault is None or fault.cause == UNIT:
                self.streak = 0
                return
            if fault.cause == CANCELLED:
                return
            self.streak += 1
            if self.streak >= self.limit:
                raise BreakerTripped(
                    f"{self.streak} attempts in a row failed for a cause other than their unit "
                    f"(WORKER_FAULT_LIMIT={self.limit}); the last: {fault}"
                )
