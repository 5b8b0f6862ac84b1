"""Batching the requests of many sessions into one model call, without waiting for nobody.

Each session (one sim client's connection) is a `Member`; its thread calls `submit` and blocks
until its answer is there. One dispatcher thread per batcher decides when the pending requests go,
runs the call and hands the answers out.

When to go: at once when `max_batch` requests are pending, or when no member that could still join
is expected before the deadline: `max_wait_s` after the batch could first have gone (the first
pending request's arrival, or the end of the last call when that request came in during it). A
member can join when it is active (it has started an episode or sent a request), has nothing
pending, and is expected soon: its expected arrival is its last answer + its think time (the EMA of
answer → next request, i.e. its sim's step), and it is not already later than that by more than
`max_wait_s` (a sim rebuilding its env, or one that left without saying). So K = 1 never waits,
K sims in lock step all go together (no 1, 7, 1, 7 ...), and a slow sim that would arrive after
the deadline is not waited for.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.model.batchstats import BatchStats

log = logging.getLogger("model_server")

THINK_EMA = 0.5  # weight of the newest think time in a member's estimate
STATS_LOG_EVERY_S = 60.0  # batch statistics go to the log at most this often (and at shutdown)


@dataclass(eq=False, slots=True)
class Member:
    """One session's standing with the batcher (see the module docstring for how it is used)."""

    active: bool = False  # it has started an episode or sent a request: it may send again
    answered_at: float = 0.0
    think_s: float = 0.0
    waiting: bool = False

    def expected_at(self) -> float:
        return self.answered_at + self.think_s


@dataclass(eq=False, slots=True)
class _Item:
    member: Member
    payload: Any
    arrived: float
    answered: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


# A call: the payloads of one batch → one outcome each (a result, or the exception for that item).
RunBatch = Callable[[list[Any]], list[Any]]


class Batcher:
    """Runs `run` on batches of up to `max_batch` payloads submitted by members' threads."""

    def __init__(
        self,
        run: RunBatch,
        max_batch: int,
        max_wait_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch}: expected an integer >= 1")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s={max_wait_s}: expected >= 0")
        self.run, self.max_batch, self.max_wait_s, self.clock = run, max_batch, max_wait_s, clock
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the dispatcher's: an arrival, a leave
        self._members: set[Member] = set()
        self._pending: list[_Item] = []
        self._awaited: set[Member] = set()  # the members the dispatcher waits for before it goes
        self._free_since = clock()  # when the last call ended: nothing could go before that
        self._stats = BatchStats()
        self._next_log = clock() + STATS_LOG_EVERY_S
        self._dispatcher: threading.Thread | None = None  # started by the first request

    def join(self) -> Member:
        member = Member(answered_at=self.clock())
        with self._lock:
            self._members.add(member)
        return member

    def leave(self, member: Member) -> None:
        with self._lock:
            self._members.discard(member)
            if member in self._awaited:
                self._awaited.discard(member)
                self._wake.notify()

    def start_episode(self, member: Member) -> None:
        """`member` is in an episode from now on (its first request follows its reset's answer)."""
        with self._lock:
            member.active = True
            member.answered_at = self.clock()

    def stats(self) -> BatchStats:
        with self._lock:
            stats = self._stats
            return BatchStats(stats.calls, stats.items, Counter(stats.sizes), stats.busy_s)

    def submit(self, member: Member, payload: Any) -> Any:
        """The outcome of `payload`'s model call (blocking); an exception for it is raised here."""
        with self._lock:
            now = self.clock()
            member.think_s += THINK_EMA * (max(0.0, now - member.answered_at) - member.think_s)
            member.waiting = member.active = True  # a front end without resets is active too
            item = _Item(member, payload, now)
            self._pending.append(item)
            if self._dispatcher is None:  # it runs the model: a debugger tracing this thread follows it
                trace = sys.gettrace()
                self._dispatcher = threading.Thread(
                    target=self._dispatch, args=(trace,), name="batcher", daemon=True
                )
                self._dispatcher.start()
            # wake the dispatcher only when this arrival can change its decision: under load, each
            # wake-up costs a wait for a core while the other sessions' requests come in
            awaited = member in self._awaited
            self._awaited.discard(member)
            if len(self._pending) == 1 or len(self._pending) >= self.max_batch or awaited:
                self._wake.notify()
        item.answered.wait()
        if item.error is not None:
            raise item.error
        return item.result

    def _dispatch(self, trace: Any) -> None:
        """The dispatcher thread: claim a batch when the rule says it goes, run it, answer it. `trace`:
        the trace function of the thread that started it (pdb's, in the in-process debug launcher)."""
        if trace is not None:
            sys.settrace(trace)
        with self._lock:
            while True:
                batch, timeout = self._claim(self.clock()) if self._pending else (None, None)
                if batch is None:
                    self._wake.wait(timeout)
                    continue
                self._lock.release()
                try:
                    started = self.clock()
                    outcomes = self._call(batch)
                    busy_s = self.clock() - started
                finally:
                    self._lock.acquire()
                self._count(len(batch), busy_s)
                self._deliver(batch, outcomes)

    def _claim(self, now: float) -> tuple[list[_Item] | None, float | None]:
        """The batch to run now, or (None, seconds to wait before deciding again)."""
        if len(self._pending) < self.max_batch:
            deadline = max(self._pending[0].arrived, self._free_since) + self.max_wait_s
            if now < deadline:
                awaited = {
                    m: m.expected_at() + self.max_wait_s
                    for m in self._members
                    if m.active
                    and not m.waiting
                    and m.expected_at() <= deadline
                    and now <= m.expected_at() + self.max_wait_s
                }
                if awaited:
                    self._awaited = set(awaited)
                    return None, min(deadline, *awaited.values()) - now
        self._awaited = set()
        batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
        return batch, None

    def _call(self, batch: list[_Item]) -> list[Any]:
        try:
            outcomes = self.run([item.payload for item in batch])
        except BaseException as exc:  # the call failed as a whole: every item in it gets the error
            return [exc] * len(batch)
        if len(outcomes) != len(batch):
            error = RuntimeError(f"batch runner returned {len(outcomes)} outcomes for {len(batch)} items")
            return [error] * len(batch)
        return outcomes

    def _deliver(self, batch: list[_Item], outcomes: list[Any]) -> None:
        now = self._free_since = self.clock()
        for item, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                item.error = outcome
            else:
                item.result = outcome
            item.member.waiting = False
            item.member.answered_at = now
            item.answered.set()

    def _count(self, size: int, busy_s: float) -> None:
        """A call of `size` items that took `busy_s` in the model, in the statistics (lock held)."""
        self._stats.calls += 1
        self._stats.items += size
        self._stats.sizes[size] += 1
        self._stats.busy_s += busy_s
        now = self.clock()
        if now >= self._next_log:
            self._next_log = now + STATS_LOG_EVERY_S
            log.info("batch stats: %s", self._stats.line())
