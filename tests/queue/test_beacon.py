"""The node-local beacon: a worker idle while another holds the last unit learns that the run is
done (or that a unit came free) within a beacon poll, not at the end of its idle back-off."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import pytest

from harness.queue import leases, listing, reaper
from harness.queue.beacon import Beacon
from harness.queue.leases import LeaseQueue, QueueSettings
from harness.queue.units import Unit

SETTINGS = QueueSettings(ttl_s=60.0, heartbeat_s=5.0, skew_s=0.0, crash_limit=3)
UNITS = [Unit("scene", f"task{i}", "clean", 0, 1, (i,)) for i in range(2)]
HOLD_S = 4.0  # the idle worker's back-off has reached 2 s by then: it would next list at ~3.75 s


@pytest.fixture(autouse=True)
def _local_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def _idle_claim(queue: LeaseQueue, out: dict[str, object]) -> None:
    lease = queue.claim()
    out["lease"], out["at"] = lease, time.monotonic()


def _hold_last_unit(root: Path, done: bool) -> tuple[dict[str, object], float, Unit]:
    """Worker a holds one unit; worker b finishes the other, then waits in `claim`; a marks its
    unit (done or released) HOLD_S later. What b's claim returned, how late after a's mark, and
    a's unit."""
    holder, idler = LeaseQueue(root, UNITS, "a", SETTINGS), LeaseQueue(root, UNITS, "b", SETTINGS)
    held = holder.claim()
    first = idler.claim()
    assert held is not None and first is not None and held.unit != first.unit
    assert idler.mark(first, done=True)
    out: dict[str, object] = {}
    waiter = threading.Thread(target=_idle_claim, args=(idler, out), daemon=True)
    waiter.start()
    time.sleep(HOLD_S)
    assert "at" not in out, "the idle worker returned while a unit was still leased"
    assert holder.mark(held, done=done)
    marked = time.monotonic()
    waiter.join(timeout=15)
    assert "at" in out
    return out, float(out["at"]) - marked, held.unit  # type: ignore[arg-type]


def test_an_idle_worker_learns_the_run_is_done_at_once(tmp_path: Path) -> None:
    out, late, _ = _hold_last_unit(tmp_path / "leases", done=True)
    assert out["lease"] is None
    assert late < 1.0, f"the idle worker learnt the run was done {late:.2f} s after its last unit"


def test_an_idle_worker_takes_a_released_unit_at_once(tmp_path: Path) -> None:
    out, late, released = _hold_last_unit(tmp_path / "leases", done=False)
    assert out["lease"] is not None and out["lease"].unit == released
    assert late < 1.0, f"the idle worker took the released unit {late:.2f} s after its release"


def test_a_woken_worker_lists_again_but_reaps_only_when_its_back_off_runs_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 62: a ring says a sibling finished or released a unit, never that a lease died; an idle
    worker reaped every lease (O(leases) on the server) at every ring, so at a 256-worker run's end
    its idle workers reaped 256 leases at each of their siblings' marks. And one ring woke every wait
    that began within the beacon's 20 ms slack after it, so a worker listed again and again. Failed
    before: 38 listings and 37 reap passes for these 10 rings (535 listings with the reaps gone alone)."""
    root = tmp_path / "leases"
    holder, idler = LeaseQueue(root, UNITS, "a", SETTINGS), LeaseQueue(root, UNITS, "b", SETTINGS)
    held, first = holder.claim(), idler.claim()
    assert held is not None and first is not None and idler.mark(first, done=True)
    calls = {"scan": 0, "inspect": 0}

    def counted(name: str, real):
        def call(*args, **kwargs):
            if threading.current_thread().name == "idler":
                calls[name] += 1
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(leases, "scan", counted("scan", listing.scan))
    monkeypatch.setattr(reaper, "inspect", counted("inspect", reaper.inspect))
    out: dict[str, object] = {}
    waiter = threading.Thread(target=_idle_claim, args=(idler, out), name="idler", daemon=True)
    waiter.start()
    for _ in range(10):  # a sibling marks a unit every 0.1 s: the idle worker's back-off never runs out
        time.sleep(0.1)
        Beacon(root).ring()
    time.sleep(0.1)
    assert holder.mark(held, done=True)
    waiter.join(timeout=15)
    assert out["lease"] is None
    assert 6 <= calls["scan"] <= 20, calls  # a listing a ring: it learns at once, and once a ring
    assert calls["inspect"] <= 2, calls


def test_a_ring_before_the_wait_is_not_a_wake_up(tmp_path: Path) -> None:
    beacon = Beacon(tmp_path / "leases")
    beacon.ring()
    time.sleep(0.1)
    start = time.monotonic()
    assert not beacon.wait(0.3)
    assert time.monotonic() - start >= 0.3
    threading.Timer(0.1, beacon.ring).start()
    start = time.monotonic()
    assert beacon.wait(5.0)
    assert time.monotonic() - start < 2.0


def test_an_unwritable_temp_dir_only_costs_the_back_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    beacon = Beacon(tmp_path / "leases")
    beacon.ring()  # no error
    start = time.monotonic()
    assert not beacon.wait(0.2)
    assert time.monotonic() - start >= 0.2
