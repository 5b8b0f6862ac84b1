"""Batching the requests of many sessions into one model call, without waiting for nobody.

Each session (one sim client's connection) is a `Member`; its thread calls `submit` and blocks
until its answer is there. One of the blocked threads at a time is the leader: it decides when the
pending requests go, runs the call (outside the lock) and hands the answers out; the others sleep
on their own event, so an arrival wakes one thread, not all of them.

When to go: at once when `max_batch` requests are pending, or when no member that could still join
is expected before the deadline (the first pending request's arrival + `max_wait_s`). A member can
join when it is in an episode, has nothing pending, and is expected soon: its expected arrival is
its last answer + its think time (the EMA of answer → next request, i.e. its sim's step), and it
is not already later than that by more than `max_wait_s` (a sim rebuilding its env, or one that left
without saying). So K = 1 never waits, K sims in lock step all go together (no 1, 7, 1, 7 ...), and
a slow sim that would arrive after the deadline is not waited for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("model_server")

THINK_EMA = 0.5  # weight of the newest think time in a member's estimate
STATS_LOG_EVERY_S = 60.0  # batch statistics go to the log at most this often (and at shutdown)


@dataclass(eq=False)
class Member:
    """One session's standing with the batcher (see the module docstring for how it is used)."""

    in_episode: bool = False
    answered_at: float = 0.0
    think_s: float = 0.0
    waiting: bool = False

    def expected_at(self) -> float:
        return self.answered_at + self.think_s


@dataclass(eq=False)
class _Item:
    member: Member
    payload: Any
    arrived: float
    event: threading.Event = field(default_factory=threading.Event)
    done: bool = False
    lead: bool = False
    result: Any = None
    error: BaseException | None = None


@dataclass
class BatchStats:
    """What the batcher did: model calls, requests answered, and how many calls had each size."""

    calls: int = 0
    items: int = 0
    sizes: Counter[int] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "items": self.items,
            "max": max(self.sizes, default=0),
            "sizes": {str(size): n for size, n in sorted(self.sizes.items())},
        }

    def line(self) -> str:
        """One parseable line: `calls=C items=N max=M sizes=1:a,2:b` (size:count)."""
        sizes = ",".join(f"{size}:{n}" for size, n in sorted(self.sizes.items())) or "-"
        return f"calls={self.calls} items={self.items} max={max(self.sizes, default=0)} sizes={sizes}"


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
        self._pending: list[_Item] = []
        self._leader: _Item | None = None
        self._stats = BatchStats()
        self._next_log = clock() + STATS_LOG_EVERY_S

    def join(self) -> Member:
        member = Member(answered_at=self.clock())
        with self._lock:
            self._members.add(member)
        return member

    def leave(self, member: Member) -> None:
        with self._lock:
            self._members.discard(member)
            self._wake.notify()

    def start_episode(self, member: Member) -> None:
        """`member` is in an episode from now on (its first request follows its reset's answer)."""
        with self._lock:
            member.in_episode = True
            member.answered_at = self.clock()

    def stats(self) -> BatchStats:
        with self._lock:
            return BatchStats(self._stats.calls, self._stats.items, Counter(self._stats.sizes))

    def submit(self, member: Member, payload: Any) -> Any:
        """The outcome of `payload`'s model call (blocking); an exception for it is raised here."""
        with self._lock:
            now = self.clock()
            member.think_s += THINK_EMA * (max(0.0, now - member.answered_at) - member.think_s)
            member.waiting = True
            item = _Item(member, payload, now)
            self._pending.append(item)
            if self._leader is None:
                self._leader = item
                item.lead = True
            else:
                self._wake.notify()
        while not item.done:
            if item.lead:
                self._lead(item)
            else:
                item.event.wait()
                item.event.clear()
        if item.error is not None:
            raise item.error
        return item.result

    def _lead(self, mine: _Item) -> None:
        """Run batches until `mine` is answered, then hand the lead to the oldest pending item."""
        with self._lock:
            while not mine.done:
                batch, timeout = self._claim(self.clock())
                if batch is None:
                    self._wake.wait(timeout)
                    continue
                self._lock.release()
                try:
                    outcomes = self._call(batch)
                finally:
                    self._lock.acquire()
                self._deliver(batch, outcomes)
            mine.lead = False
            self._leader = self._pending[0] if self._pending else None
            if self._leader is not None:
                self._leader.lead = True
                self._leader.event.set()

    def _claim(self, now: float) -> tuple[list[_Item] | None, float | None]:
        """The batch to run now, or (None, seconds to wait before deciding again)."""
        if len(self._pending) < self.max_batch:
            deadline = self._pending[0].arrived + self.max_wait_s
            if now < deadline:
                joinable = [
                    m.expected_at() + self.max_wait_s
                    for m in self._members
                    if m.in_episode
                    and not m.waiting
                    and m.expected_at() <= deadline
                    and now <= m.expected_at() + self.max_wait_s
                ]
                if joinable:
                    return None, min(deadline, *joinable) - now
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
        now = self.clock()
        for item, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                item.error = outcome
            else:
                item.result = outcome
            item.done = True
            item.member.waiting = False
            item.member.answered_at = now
            item.event.set()
        self._stats.calls += 1
        self._stats.items += len(batch)
        self._stats.sizes[len(batch)] += 1
        if now >= self._next_log:
            self._next_log = now + STATS_LOG_EVERY_S
            log.info("batch stats: %s", self._stats.line())
