"""Chaos on real kernel NFS (nfs.chaos_driver runs it inside the guest): workers of 2 sim slots each
split over two client mounts as two nodes, random SIGKILLs of workers, model servers (a killed one
is restarted by one slot's thread, under the other slot's episodes) and sim clients, and one worker
frozen (SIGSTOP) past LEASE_TTL while it holds a lease. Afterwards, judged on the server's own
files: every planned (unit, seed) has exactly one record after dedup and it is a result, no record
is torn, no unit is lost, only the crashing unit is quarantined, the frozen worker committed
nothing for the lease it lost (no done mark under it, no record after the reap but those of its own
fresh claim of the unit once thawed), and no process of the run outlived the workers.

Scale, to fit the guest's one CPU (a sim client costs ~1 s of CPU there to start, and a killed
worker's next incarnation starts a server and 2 of them): 6 workers (3 a node) of 2 slots, 41 cells
x 4 seeds in slices of 2 = 82 units (2 of them always crash), episodes of 5 x 100 ms steps, a kill
every 3-6 s, 16 in all (restarts take most of the guest's CPU: kills that went on to the end left
CI at 76/82 units after 420 s), LEASE_TTL 6 s; 2-5 min. The local version:
tests/worker/test_chaos.py."""

from __future__ import annotations

import signal

import pytest

from nfs.facts import run_scenario

pytestmark = pytest.mark.nfs

KNOBS = {
    "LEASE_TTL": "6", "LEASE_SKEW_S": "1", "HEARTBEAT_S": "0.5", "STALL_TIMEOUT": "30", "CRASH_LIMIT": "4",
    "FASTBENCH_STEPS": "5", "FASTBENCH_STEP_MS": "100", "SIMS_PER_WORKER": "2",
}  # fmt: skip
WORKERS = 6
ARGS = ("--workers", str(WORKERS), "--cells", "40", "--seeds", "4", "--unit-seeds", "2")
ARGS += ("--kill-every", "3", "6", "--kills", "16")  # then none: restarts would starve a slow guest


def stopped_by_faults(status: int, last_line: str) -> bool:
    """Exit 1 because its model server died too often, or its breaker tripped (faults not its units')."""
    stopped = ("model server died", "attempts in a row failed for a cause other than their unit")
    return status == 1 and any(s in last_line for s in stopped)


def test_chaos_on_nfs_every_seed_once_and_the_frozen_worker_commits_nothing(nfs_guest) -> None:
    f = run_scenario(nfs_guest, "chaos_driver", *ARGS, timeout=540, **KNOBS)
    frozen = f["frozen"]
    print(
        f"\nNFS chaos: workers={f['workers']} (node1 {f['nodes']['1']}, node2 {f['nodes']['2']}, "
        f"{f['incarnations']} incarnations) units={f['units']} seeds={f['planned_seeds']} kills={f['kills']} "
        f"records={f['records']} duplicates_before_dedup={f['duplicates']} "
        f"rerun_successes={f['rerun_successes']} "
        f"lost={len(f['lost'])} double={len(f['double'])} leftovers={len(f['leftovers'])} "
        f"wall={f['wall_s']} s\n"
        f"frozen {frozen.get('worker')} for {frozen.get('frozen_s')} s holding {frozen.get('held')} "
        f"(episode of seed {frozen.get('running_seed')} running), "
        f"done by {frozen.get('done_by')} (its fresh claim: {frozen.get('fresh_claim')}), "
        f"its records for that unit {frozen.get('records_for_held_unit')}, "
        f"reaped at {frozen.get('t_reaped_iso')}"
    )  # fmt: skip
    assert sum(f["kills"].values()) >= 10
    assert all(f["kills"].get(role) for role in ("worker", "server", "simclient")), f["kills"]
    assert f["nodes"] == {"1": WORKERS // 2, "2": WORKERS // 2}
    for _wid, status, last_line in f["mid_run_exits"]:  # killed, or stopped by the kills
        assert status == -signal.SIGKILL or stopped_by_faults(status, last_line), last_line
    # after the last unit: nothing left to claim, or stopped by a kill in the killer's last passes
    for _wid, status, last_line in f["final_exits"]:
        assert status == 0 or stopped_by_faults(status, last_line), (status, last_line)
    assert f["torn"] == [] and f["bad"] == []
    assert f["lost"] == [] and f["double"] == []
    assert f["check_finished"] == "ok"
    # The frozen worker: reaped while frozen, its unit finished under another lease (another
    # worker's, or its own fresh claim once thawed), nothing committed by the lease it lost.
    assert frozen.get("t_reaped"), f"the frozen worker's lease was never reaped: {frozen}"
    assert frozen["frozen_s"] > float(KNOBS["LEASE_TTL"])
    for key, done in frozen["done_by"].items():
        assert done is not None and done["generation"] != frozen["held_generations"][key], frozen
    assert frozen["records_after_reap"] == [], frozen
    assert f["leftovers"] == [], "processes of the run outlived their workers"
