"""The model server's memory after the hello (issues 26 and 63): 8 greeted clients each sending one
~64 MiB msgpack frame at once must not take the server up by more than 256 MB, and the server must
give the memory back once they left; K = 1, 4, 8 clients each sending a 16 MiB frame of one-byte
items (which decoded into 72x their size before items were counted) neither, nor stall another
session for long. The server runs in its own process; its RSS is read from /proc."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from harness.model.inflight import SMALL_FRAME, Busy, InflightBudget
from harness.wire.errors import WireError
from support.memattack import AMPLIFYING, MiB, RssSampler, attack, rss, settle
from support.wirekit import SPEC, client, model_python, start_server_process, stop_process, wait_for

PEAK_BOUND = 256 * 1000 * 1000  # the bound on peak RSS growth (MB)
STALL_BOUND_S = 2.0  # the longest another session's ping may wait while the attack decodes
AFTER_BOUND = 64 * 1000 * 1000  # and on what is left once the clients are gone


def test_eight_clients_of_64_mib_frames_keep_the_server_bounded_and_it_gives_memory_back(
    tmp_path: Path,
) -> None:
    ready, log = tmp_path / "ready.json", tmp_path / "server.log"
    proc = start_server_process(model_python() or sys.executable, ready, ["--policy", "hold"], log)
    try:
        wait_for(ready.exists, timeout=120)
        result = attack(ready, 1, MiB)  # warm up: the first frames' code paths and buffers
        assert result.replies == ["infer"], log.read_text()
        base = rss(proc.pid)
        sampler = RssSampler(proc.pid)
        result = attack(ready, 8, 64 * MiB - 64)
        peak = sampler.stop()
        assert proc.poll() is None, log.read_text()
        # every client is answered: served in turn, or (on a machine too slow to serve the others
        # within the budget's wait) told the server is busy; never silently dropped
        assert all(r == "infer" or r.startswith("error: server busy") for r in result.replies), result
        assert "infer" in result.replies, result
        assert peak - base <= PEAK_BOUND, f"peak RSS grew by {(peak - base) / 1e6:.0f} MB"
        after = settle(proc.pid, base + AFTER_BOUND, timeout_s=60)
        assert after - base <= AFTER_BOUND, f"{(after - base) / 1e6:.0f} MB still held after the clients left"
        assert attack(ready, 1, MiB).replies == ["infer"]  # and it still serves
    finally:
        stop_process(proc)


@pytest.mark.parametrize("k", [1, 4, 8])
def test_frames_of_small_items_are_refused_unbuilt_and_stall_no_other_session(tmp_path: Path, k: int) -> None:
    ready, log = tmp_path / "ready.json", tmp_path / "server.log"
    proc = start_server_process(model_python() or sys.executable, ready, ["--policy", "hold"], log)
    try:
        wait_for(ready.exists, timeout=120)
        assert attack(ready, 1, MiB).replies == ["infer"]  # warm up
        base = rss(proc.pid)
        with client(ready) as bystander:
            bystander.hello(SPEC)
            waits: list[float] = []
            stop = threading.Event()

            def ping() -> None:
                while not stop.is_set():
                    started = time.perf_counter()
                    bystander.ping()
                    waits.append(time.perf_counter() - started)
                    time.sleep(0.005)

            pinger = threading.Thread(target=ping)
            pinger.start()
            sampler = RssSampler(proc.pid)
            try:
                for name, item in AMPLIFYING.items():
                    replies = attack(ready, k, 16 * MiB, item=item).replies
                    assert all("more than 100000 items" in r for r in replies), (name, replies)
            finally:
                peak = sampler.stop()
                stop.set()
                pinger.join(30)
        assert proc.poll() is None, log.read_text()
        assert peak - base <= PEAK_BOUND, f"peak RSS grew by {(peak - base) / 1e6:.0f} MB"
        assert waits and max(waits) <= STALL_BOUND_S, f"another session waited {max(waits):.2f} s"
        assert attack(ready, 1, MiB).replies == ["infer"]  # and it still serves
    finally:
        stop_process(proc)


def test_budget_charges_big_requests_twice_over_and_small_ones_not_at_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A big frame costs its body and what it decodes into (DECODED_FACTOR = 2)."""
    monkeypatch.setattr("harness.model.inflight.WAIT_S", 0.5)
    budget = InflightBudget(8 * MiB)
    with budget.reserve(SMALL_FRAME):
        assert budget.held == 0  # a small frame never waits and costs the budget nothing
    big = budget.reserve(3 * MiB)
    assert budget.held == 6 * MiB
    with pytest.raises(Busy, match=r"server busy: 6291456 bytes .* MODEL_SERVER_INFLIGHT_BYTES=8388608"):
        budget.reserve(2 * MiB)  # 4 MiB more would pass the budget: waits WAIT_S, then refused
    assert budget.held == 6 * MiB  # a refused request holds nothing
    with pytest.raises(
        WireError, match=r"exceeds the limit of 8388608 bytes \(MODEL_SERVER_INFLIGHT_BYTES\)"
    ):
        budget.reserve(5 * MiB)  # could never fit: refused without waiting
    waiter = threading.Thread(target=lambda: budget.reserve(2 * MiB).release())
    waiter.start()  # waits for `big`
    big.release()
    waiter.join(30)
    assert not waiter.is_alive() and budget.held == 0
