"""Chaos: 8 workers of 2 sim slots each over 200 units while a killer SIGKILLs random workers, model
servers and sim clients every few seconds (killed workers are replaced, as a requeue would; a killed
server is restarted by whichever slot asks first, and must outlive that slot's thread). At the end
every (unit, seed) is recorded exactly once after dedup, no record is torn, no lease is left behind,
only the units made to crash are quarantined, and no process of the run is left."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from harness.config.rundir import RunDir
from harness.queue.listing import scan
from support.leftovers import wait_for_no_leftovers
from support.poolkit import check_finished, make_run, pool_env, start_worker, stop_group

WORKERS = 8
CRASH_LIMIT = 4  # high enough that a unit hit by the killer 4 times is (very) unlikely
CRASHING = {"crash0", "crash1"}
ROLES = {"policy_model_server": "server", "eval_policy_client": "simclient"}


def _children(worker_pids: set[int]) -> dict[str, list[int]]:
    """Model servers and sim clients of the given workers, by role."""
    found: dict[str, list[int]] = {"server": [], "simclient": []}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                ppid = int(handle.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid in worker_pids:
            role = next((r for marker, r in ROLES.items() if marker in cmdline), None)
            if role:
                found[role].append(int(entry))
    return found


def _all_finished(run: RunDir, units: int) -> bool:
    listing = scan(run.leases)
    quarantined = {key for key, n in listing.errored_attempts.items() if n >= CRASH_LIMIT}
    return len(listing.done) + len(quarantined) >= units


def test_chaos_every_seed_once_no_torn_record_no_lease_left(tmp_path: Path) -> None:
    cells = [(f"scene{i % 5}", f"task{i}") for i in range(98)] + [("scene0", t) for t in sorted(CRASHING)]
    run = make_run(tmp_path / "run", cells)
    env = pool_env(
        run,
        EVAL_TEST_NUM="4",
        UNIT_SEEDS="2",
        CRASH_LIMIT=str(CRASH_LIMIT),
        FASTBENCH_CRASH=",".join(sorted(CRASHING)),
        FASTBENCH_STEP_MS="300",  # ~30 s of work: with persistent sims 2 ms steps end before the killer
        SIMS_PER_WORKER="2",
    )
    units = 2 * len(cells)
    rng = random.Random(1234)
    slots: dict[int, subprocess.Popen] = {}
    incarnation = Counter()
    kills: Counter = Counter()
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(slot: int) -> None:
        incarnation[slot] += 1
        wid = f"w{slot}i{incarnation[slot]}"
        slots[slot] = start_worker(env, wid, logs / f"{wid}.log")

    for slot in range(WORKERS):
        start(slot)
    deadline = time.monotonic() + 420
    next_kill = time.monotonic() + 2
    try:
        while not _all_finished(run, units):
            assert time.monotonic() < deadline, f"chaos run did not finish; kills so far {dict(kills)}"
            for slot, proc in slots.items():
                if proc.poll() is not None:
                    assert proc.returncode == -signal.SIGKILL, f"worker exited {proc.returncode} mid-run"
                    start(slot)
            if time.monotonic() >= next_kill:
                live = {proc.pid for proc in slots.values() if proc.poll() is None}
                targets = {"worker": sorted(live), **_children(live)}
                role = rng.choice([r for r, pids in targets.items() if pids] or ["worker"])
                if targets[role]:
                    os.kill(rng.choice(targets[role]), signal.SIGKILL)
                    kills[role] += 1
                next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
            time.sleep(0.1)
        for proc in slots.values():  # the workers see that nothing is left and exit on their own
            assert proc.wait(60) in (0, -signal.SIGKILL)
    finally:
        for proc in slots.values():
            stop_group(proc)
    print(f"kills: {dict(kills)}, worker incarnations: {sum(incarnation.values())}")
    assert kills["worker"] and kills["server"] and kills["simclient"], dict(kills)
    check_finished(run, env, CRASHING)
    assert wait_for_no_leftovers(str(tmp_path)) == [], "processes of the run outlived their workers"
