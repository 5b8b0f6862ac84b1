"""The batcher on its own: when a batch goes, who is waited for, and how failures reach the items."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.model.batcher import Batcher, Member


class Recorder:
    """A batch runner that answers each payload doubled and remembers each batch it ran."""

    def __init__(self, sleep_s: float = 0.005) -> None:
        self.batches: list[list[int]] = []
        self.sleep_s = sleep_s

    def __call__(self, payloads: list[int]) -> list[int]:
        time.sleep(self.sleep_s)
        self.batches.append(list(payloads))
        return [2 * p for p in payloads]


def in_episode(batcher: Batcher, k: int) -> list[Member]:
    members = [batcher.join() for _ in range(k)]
    for m in members:
        batcher.start_episode(m)
    return members


def lock_step(batcher: Batcher, members: list[Member], steps: int) -> list[list[int]]:
    """Each member's thread submits `steps` requests back to back, as K sims that only wait on the model."""

    def sim(i: int) -> list[int]:
        return [batcher.submit(members[i], 100 * i + s) for s in range(steps)]

    with ThreadPoolExecutor(len(members)) as pool:
        return list(pool.map(sim, range(len(members))))


def test_a_lone_member_never_waits_for_the_bound() -> None:
    run = Recorder(sleep_s=0)
    batcher = Batcher(run, max_batch=8, max_wait_s=30.0)
    (member,) = in_episode(batcher, 1)
    start = time.monotonic()
    assert [batcher.submit(member, s) for s in range(20)] == [2 * s for s in range(20)]
    assert time.monotonic() - start < 10  # waiting once for the 30 s bound would fail this
    assert batcher.stats().sizes == {1: 20}


def test_members_in_lock_step_go_together_every_time() -> None:
    """No 1, 7, 1, 7 ...: the members just answered are expected back, so each batch waits for them."""
    run = Recorder()
    batcher = Batcher(run, max_batch=8, max_wait_s=5.0)
    members = in_episode(batcher, 8)
    answers = lock_step(batcher, members, steps=6)
    assert answers == [[2 * (100 * i + s) for s in range(6)] for i in range(8)]
    assert [len(b) for b in run.batches] == [8] * 6
    stats = batcher.stats().as_dict()
    assert stats.pop("busy_s") >= 6 * run.sleep_s
    assert stats == {"calls": 6, "items": 48, "max": 8, "sizes": {"8": 6}}
    assert batcher.stats().line().startswith("calls=6 items=48 max=8 sizes=8:6 busy_s=")


def test_a_cohort_that_arrived_during_a_call_waits_for_the_one_in_it() -> None:
    """Five sims start while three are in a call: after it, the five wait for the three (the bound
    counts from the call's end, not from their arrival), and from then on all eight go together."""
    run = Recorder(sleep_s=0.2)
    batcher = Batcher(run, max_batch=8, max_wait_s=0.05)
    first = in_episode(batcher, 3)
    later = [batcher.join() for _ in range(5)]

    def sim(member: Member, delay: float) -> None:
        time.sleep(delay)
        if delay:
            batcher.start_episode(member)
        for s in range(3):
            time.sleep(0.01)  # its sim's step: the model is free again before it is back
            batcher.submit(member, s)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(sim, first + later, [0.0] * 3 + [0.05] * 5))
    assert [len(b) for b in run.batches] == [3, 8, 8, 5]


def test_batches_never_exceed_max_batch() -> None:
    run = Recorder()
    batcher = Batcher(run, max_batch=3, max_wait_s=0.2)
    members = in_episode(batcher, 7)
    lock_step(batcher, members, steps=4)
    assert max(len(b) for b in run.batches) == 3
    assert sum(len(b) for b in run.batches) == 28


def test_a_member_that_went_quiet_is_waited_for_at_most_once() -> None:
    run = Recorder(sleep_s=0)
    batcher = Batcher(run, max_batch=8, max_wait_s=1.0)
    _quiet, busy = in_episode(batcher, 2)  # `_quiet` rebuilds its env, or left without closing
    batcher.submit(busy, 0)  # may wait up to the bound for `quiet`: it was just reset
    start = time.monotonic()
    for s in range(10):
        batcher.submit(busy, s)
    assert time.monotonic() - start < 5  # waiting the 1 s bound each time would take 10 s
    assert run.batches == [[s] for s in [0, *range(10)]]


def test_members_outside_an_episode_or_gone_are_not_waited_for() -> None:
    run = Recorder(sleep_s=0)
    batcher = Batcher(run, max_batch=8, max_wait_s=30.0)
    batcher.join()  # said hello, never reset
    left = batcher.join()
    batcher.start_episode(left)
    batcher.leave(left)
    (member,) = in_episode(batcher, 1)
    start = time.monotonic()
    assert batcher.submit(member, 4) == 8
    assert time.monotonic() - start < 10


def test_a_slow_sim_is_not_waited_for_once_its_pace_is_known() -> None:
    """A member whose think time is far beyond the bound is expected after the deadline."""
    run = Recorder(sleep_s=0)
    batcher = Batcher(run, max_batch=8, max_wait_s=0.5)
    slow, fast = in_episode(batcher, 2)
    slow.think_s = 3600.0  # learned: its sim takes an hour a step
    start = time.monotonic()
    for s in range(10):
        batcher.submit(fast, s)
    assert time.monotonic() - start < 4  # 10 waits of the 0.5 s bound would take 5 s


def test_a_failed_call_fails_every_item_in_it_and_the_batcher_goes_on() -> None:
    calls: list[list[int]] = []

    def run(payloads: list[int]) -> list[object]:
        calls.append(payloads)
        if -1 in payloads:
            raise RuntimeError("model exploded")
        if -2 in payloads:
            return []  # too few outcomes
        return [ValueError(f"bad {p}") if p == 13 else p for p in payloads]

    batcher = Batcher(run, max_batch=4, max_wait_s=0.0)
    member = batcher.join()
    with pytest.raises(RuntimeError, match="model exploded"):
        batcher.submit(member, -1)
    with pytest.raises(RuntimeError, match="returned 0 outcomes for 1 items"):
        batcher.submit(member, -2)
    with pytest.raises(ValueError, match="bad 13"):
        batcher.submit(member, 13)
    assert batcher.submit(member, 5) == 5


def test_concurrent_submitters_each_get_their_own_answer() -> None:
    run = Recorder(sleep_s=0.001)
    batcher = Batcher(run, max_batch=4, max_wait_s=0.002)
    members = in_episode(batcher, 6)
    barrier = threading.Barrier(6)

    def sim(i: int) -> list[int]:
        barrier.wait()
        return [batcher.submit(members[i], 1000 * i + s) for s in range(30)]

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(sim, range(6)))
    assert answers == [[2 * (1000 * i + s) for s in range(30)] for i in range(6)]
    assert batcher.stats().items == 180


@pytest.mark.parametrize(
    ("max_batch", "max_wait_s", "message"), [(0, 0.0, "max_batch=0"), (1, -1.0, "max_wait_s")]
)
def test_bad_settings_are_refused(max_batch: int, max_wait_s: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Batcher(Recorder(), max_batch, max_wait_s)


def test_a_call_that_raises_even_systemexit_answers_its_batch_and_the_batcher_goes_on() -> None:
    def run(payloads: list[int]) -> list[int]:
        time.sleep(0.05)
        if -1 in payloads:
            raise SystemExit("the model call is being torn down")
        return payloads

    batcher = Batcher(run, max_batch=2, max_wait_s=5.0)
    doomed, other = in_episode(batcher, 2)
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(batcher.submit, doomed, -1), pool.submit(batcher.submit, other, 5)]
        errors = [f.exception(timeout=10) for f in futures]
        assert [type(e).__name__ for e in errors] == ["SystemExit", "SystemExit"]
        assert pool.submit(batcher.submit, other, 6).result(timeout=10) == 6


def test_members_that_never_reset_batch_once_they_have_sent() -> None:
    """A front end without resets (openpi's clients only send observations): active from its first request."""
    run = Recorder()
    batcher = Batcher(run, max_batch=8, max_wait_s=0.5)
    members = [batcher.join() for _ in range(4)]
    lock_step(batcher, members, steps=6)
    # Only the start may be split (a member is not expected back before its first request; a slow
    # machine starts the threads far apart): from its first batch on, a member is in every batch
    # until its last request, so each member's batches are consecutive.
    who = [[payload // 100 for payload in batch] for batch in run.batches]
    for i in range(len(members)):
        mine = [n for n, batch in enumerate(who) if i in batch]
        assert mine == list(range(mine[0], mine[0] + 6)), who


def test_one_dispatcher_thread_runs_every_call() -> None:
    """Eight members in lock step: every batch runs on the batcher's one dispatcher thread, which
    is none of the submitters, and each submitter gets its own answer (or its own error)."""
    callers: set[int] = set()

    def run(payloads: list[int]) -> list[object]:
        callers.add(threading.get_ident())
        time.sleep(0.005)
        return [ValueError(f"bad {p}") if p % 100 == 13 else 2 * p for p in payloads]

    batcher = Batcher(run, max_batch=8, max_wait_s=5.0)
    members = in_episode(batcher, 8)
    submitters: set[int] = set()

    def sim(i: int) -> list[object]:
        submitters.add(threading.get_ident())
        answers: list[object] = []
        for step in range(14):
            try:
                answers.append(batcher.submit(members[i], 100 * i + step))
            except ValueError as exc:
                answers.append(str(exc))
        return answers

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(sim, range(8)))
    expected = [
        [f"bad {100 * i + 13}" if s == 13 else 2 * (100 * i + s) for s in range(14)] for i in range(8)
    ]
    assert answers == expected
    assert batcher.stats().sizes == {8: 14}
    assert len(callers) == 1 and not callers & submitters


def test_a_call_is_counted_before_its_answers_leave() -> None:
    """A client that holds its answer and asks for the statistics sees its call in them."""
    batcher = Batcher(lambda payloads: payloads, max_batch=8, max_wait_s=0.0)
    member = batcher.join()
    for n in range(1, 4):
        assert batcher.submit(member, n) == n
        stats = batcher.stats()
        assert (stats.calls, stats.items) == (n, n)
