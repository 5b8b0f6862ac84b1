"""Batching the requests of many sessions into one model call, without waiting for nobody.

Each session (one sim client's connection) is a `Member`; its thread calls `submit` and blocks
until its answer is there. One of the blocked threads at a time is the leader: it decides when the
pending requests go, runs the call (outside the lock) and hands the answers out; the others sleep
on their own event, so an arrival wakes one thread, not all of them; and the arrival that lets a
waiting batch go runs it itself (it is awake already) instead of waking the leader. An event is
made only for a thread that has to wait: one that can lead at once (K = 1, a batch it fills) runs
its call without one, and without letting the lock go between its arrival and the decision.

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
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
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
    answered: Callable[[Any], None] | None = None  # sends the result from the thread that has it
    event: threading.Event | None = None  # made (under the lock) only once the item has to wait
    done: bool = False
    lead: bool = False
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
        self._wake = threading.Condition(self._lock)  # the leader's: a new arrival or a deadline
        self._members: set[Member] = set()
        self._active = 0  # how many of them are active (a member never becomes inactive again)
        self._pending: list[_Item] = []
        self._leader: _Item | None = None
        self._running = False  # the leader is in a model call (no one else may start one)
        self._awaited: set[Member] = set()  # the members the leader is waiting for
        self._free_since = clock()  # when the last call ended: nothing could go before that
        self._stats = BatchStats()
        self._next_log = clock() + STATS_LOG_EVERY_S

    def join(self) -> Member:
        member = Member(answered_at=self.clock())
        with self._lock:
            self._members.add(member)
        return member

    def alone(self, member: Member) -> bool:
        """Whether no other member is active: `member`'s requests have the batcher to themselves
        (a hint, read without the lock)."""
        return self._active == (1 if member.active else 0)

    def _activate(self, member: Member) -> None:
        """`member` may send requests from now on (lock held)."""
        if not member.active:
            member.active = True
            self._active += 1

    def leave(self, member: Member) -> None:
        with self._lock:
            if member in self._members and member.active:
                self._active -= 1
            self._members.discard(member)
            self._awaited.discard(member)
            self._wake.notify_all()

    def start_episode(self, member: Member) -> None:
        """`member` is in an episode from now on (its first request follows its reset's answer)."""
        with self._lock:
            self._activate(member)
            member.answered_at = self.clock()

    def stats(self) -> BatchStats:
        with self._lock:
            stats = self._stats
            return BatchStats(stats.calls, stats.items, Counter(stats.sizes), stats.busy_s)

    def submit(self, member: Member, payload: Any, answered: Callable[[Any], None] | None = None) -> Any:
        """The outcome of `payload`'s model call (blocking); an exception for it is raised here.

        `answered`, when given, is called with a result (never an exception) by the thread that ran
        the call, before this one is woken: it sends the answer out (`harness.model.earlyreply`),
        so it must not block and must not raise."""
        with self._lock:
            now = self.clock()
            member.think_s += THINK_EMA * (max(0.0, now - member.answered_at) - member.think_s)
            member.waiting = True
            self._activate(member)  # a front end without resets is active too
            item = _Item(member, payload, now, answered)
            self._pending.append(item)
            self._awaited.discard(member)
            if self._leader is None:
                self._leader = item
                item.lead = True
            elif not self._running and (not self._awaited or len(self._pending) >= self.max_batch):
                # this arrival lets the waiting leader go: run the batch from this thread (it is
                # already awake) and send the old leader back to waiting for its answer
                self._leader.lead = False
                self._leader.event = self._leader.event or threading.Event()
                self._leader = item
                item.lead = True
                self._wake.notify_all()
            if item.lead:  # leading at once (K = 1, or the arrival that fills a batch): no release
                self._lead(item)
            else:
                item.event = threading.Event()
        while not item.done:
            if item.lead:  # the lead was handed to it while it waited
                with self._lock:
                    self._lead(item)
            else:
                item.event.wait()
                item.event.clear()
        if item.error is not None:
            raise item.error
        return item.result

    def _lead(self, mine: _Item) -> None:
        """Run batches until `mine` is answered, then hand the lead to the oldest pending item.
        Called with the lock held (released during the model call and the waits)."""
        while not mine.done and mine.lead:
            batch, timeout = self._claim(self.clock())
            if batch is None:
                self._wake.wait(timeout)
                continue
            self._running = True
            self._lock.release()
            started = self.clock()
            counted = False
            try:
                outcomes = self._call(batch)
                busy_s = self.clock() - started
                with self._lock:  # before any answer leaves: a client holding one sees its call counted
                    self._count(len(batch), busy_s)
                counted = True
                _answer(batch, outcomes)
            except BaseException:  # this thread is being torn down: the others must not hang
                self._lock.acquire()
                self._running = False
                if not counted:
                    self._count(len(batch), 0.0)
                self._deliver(batch, [RuntimeError("the model call was interrupted")] * len(batch))
                self._hand_off(mine)
                raise
            self._lock.acquire()
            self._running = False
            self._deliver(batch, outcomes)
        if mine.lead:  # else another arrival took the lead over while this one waited
            self._hand_off(mine)

    def _hand_off(self, mine: _Item) -> None:
        """`mine` leads no more: the oldest pending item's thread leads next, if there is one."""
        mine.lead = False
        self._leader = self._pending[0] if self._pending else None
        if self._leader is not None:
            self._leader.lead = True
            if self._leader.event is not None:  # None only for `mine`, whose thread is awake
                self._leader.event.set()

    def _claim(self, now: float) -> tuple[list[_Item] | None, float | None]:
        """The batch to run now, or (None, seconds to wait before deciding again).

        The wait is counted from when the batch could first have gone: the first pending request's
        arrival, or the end of the last call if it arrived during that call."""
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
        except Exception as exc:  # the call failed as a whole: every item in it gets the error
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
            item.done = True
            item.member.waiting = False
            item.member.answered_at = now
            if item.event is not None:  # None: the item that leads, which is not waiting
                item.event.set()

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


def _answer(batch: list[_Item], outcomes: list[Any]) -> None:
    """Each result whose item says how, sent from this thread before its own thread is woken."""
    for item, outcome in zip(batch, outcomes, strict=True):
        if item.answered is not None and not isinstance(outcome, BaseException):
            item.answered(outcome)
