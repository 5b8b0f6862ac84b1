"""The lease queue on real kernel NFS, two client mounts acting as two nodes (nfs.lease_scenarios
runs each case inside the guest): exclusive claims, heartbeats seen across mounts, reaping of dead
and frozen owners and fencing, errored-attempt counting and quarantine, and a done unit's lease that a stale
name cache must not reap. The same properties on one local disk: tests/queue/test_leases.py."""

from __future__ import annotations

from collections import Counter

import pytest

from nfs.facts import run_scenario

pytestmark = pytest.mark.nfs

KNOBS = {
    "USE_EVAL_SEEDS": "0", "EVAL_TEST_NUM": "4", "UNIT_SEEDS": "0", "BENCH_CONFIG": "clean",
    "LEASE_TTL": "60", "HEARTBEAT_S": "0.2", "LEASE_SKEW_S": "0", "CRASH_LIMIT": "3",
}  # fmt: skip
SHORT_TTL = {**KNOBS, "LEASE_TTL": "2", "LEASE_SKEW_S": "0.5"}


def test_claims_are_exclusive_across_mounts(nfs_guest) -> None:
    facts = run_scenario(nfs_guest, "lease_scenarios", "claims", "6", **KNOBS)
    assert facts["exitcodes"] == [0] * 6
    claimed = Counter(key for keys in facts["claims"].values() for key in keys)
    assert sorted(claimed) == facts["units"] and set(claimed.values()) == {1}, claimed  # each unit once
    by_mount = Counter(wid[:2] for wid, keys in facts["claims"].items() for _ in keys)
    assert by_mount["m1"] and by_mount["m2"], by_mount  # both nodes took work
    assert facts["server_lease_contents"] == {key: ["done"] for key in facts["units"]}  # done.<gen> only
    assert facts["server_done_hints"] == facts["units"]
    assert facts["server_dot_names"] == []  # no staged claim, tombstone or probe left
    assert facts["mkdir_refused"] == {"1": 30, "2": 30}  # a done unit cannot be claimed again


def test_heartbeats_across_mounts_then_frozen_owner_reaped_and_fenced(nfs_guest) -> None:
    facts = run_scenario(nfs_guest, "lease_scenarios", "stopped-owner", **SHORT_TTL)
    key = facts["key"]
    assert facts["reaped_while_beating"] == []  # node 2 reads node 1's heartbeats fresh
    assert facts["reaped_at_once_when_stopped"] == []  # alive on another host: only the TTL can tell
    assert facts["reaped_after_ttl"] == [key]
    assert facts["reclaimed"] == key
    assert facts["holder"] == {"lost": True, "marked": False}  # fenced at its next heartbeat
    assert facts["done_by_after_resume"] is None
    assert facts["reclaimer_marked"] is True and facts["done_by_at_end"] == "reclaimer"


@pytest.mark.parametrize("where", ["same-host", "other-host"])
def test_dead_owner_reaped_and_reclaimed_from_the_other_mount(nfs_guest, where: str) -> None:
    knobs = {**SHORT_TTL, "LEASE_TTL": "60"} if where == "same-host" else SHORT_TTL
    facts = run_scenario(nfs_guest, "lease_scenarios", "dead-owner", where, **knobs)
    key = facts["key"]
    if where == "same-host":
        assert facts["reaped_at_once"] == [key]  # LEASE_TTL is 60 s: the dead pid decided it
    else:
        assert facts["reaped_at_once"] == []
        assert facts["reaped_after_ttl"] == [key]
    assert facts["reclaimed"] == key and facts["reclaimer_marked"] is True
    assert facts["done_by"] == "reclaimer"


def test_crash_count_and_quarantine_across_mounts(nfs_guest) -> None:
    facts = run_scenario(nfs_guest, "lease_scenarios", "crashes", **KNOBS)
    assert facts["quarantined_after"] == [False, False, True]
    assert facts["state_via_mnt2"]["crashy"] == ["quarantined", 3, "boom 3"]
    assert facts["state_via_mnt2"]["fine"][0] == "pending"
    assert facts["server_crash_files"] == [f"s__crashy__0-4.crash.{n}" for n in (1, 2, 3)]
    # Node 2 listed the queue at 2 crashes; node 1's third made it quarantined: no claim may take it.
    assert facts["stale_claim"] is None
    assert facts["fresh_claim"] == "s__fine__0-4" and facts["fresh_marked"] is True
    assert facts["claim_when_nothing_left"] is None


def test_done_lease_is_not_reaped_through_stale_caches(nfs_guest) -> None:
    facts = run_scenario(nfs_guest, "lease_scenarios", "done-lease", **SHORT_TTL)
    print(f"node 2's view of the lease dir and {facts['key']}.done: while held {facts['mnt2_before']}, "
          f"{SHORT_TTL['LEASE_TTL']} s after done {facts['mnt2_after']}")  # fmt: skip
    assert facts["holder_marked"] is True and facts["server_done_by"] == "holder"
    assert facts["reaped"] == []
    assert facts["server_lease"] == ["done"]  # a finished unit's lease dir stays, holding done.<gen>
    assert facts["claim_after"] is None and facts["stale_claim_after"] is None


def test_a_claimant_stalled_mid_claim_never_shares_the_unit(nfs_guest) -> None:
    facts = run_scenario(nfs_guest, "lease_scenarios", "stalled-claim", **SHORT_TTL)
    assert facts["other_claimed"] == "s__u0__0-4" and facts["other_marked"] is True
    assert facts["stalled"] == {"claimed": None, "marked": False}  # its claim could not land
    assert facts["server_lease"] == ["done"] and facts["done_by"] == "other"
