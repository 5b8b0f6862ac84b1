"""Guest side of tests/nfs/test_nfs_leases.py: the lease queue driven through two NFS client mounts.

    python -m nfs.lease_scenarios MNT1 MNT2 EXPORT SCENARIO [ARG]

Each scenario makes its own run dir through MNT1, uses it through both mounts (processes on MNT1 act
as node 1, on MNT2 as node 2; a process may also take another hostname in a UTS namespace of its
own, so only its heartbeat can tell the other node it is alive) and reports facts (nfs.facts). What
the filesystem really holds is read from EXPORT, the server's own tmpfs, past every client cache.
Knobs (LEASE_TTL, HEARTBEAT_S, ...) come from the environment, as the workers take them.
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import knobs
from harness.config.create import create_run
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.queue.units import Unit
from harness.runqueue import open_queue, queue_states, run_units
from nfs.facts import emit, require_nfs

CTX = mp.get_context("fork")
CLONE_NEWUTS = 0x04000000


@dataclass(frozen=True)
class Views:
    """One run dir seen through mount 1, mount 2 and the server; `shm` is guest-local scratch."""

    mnt1: RunDir
    mnt2: RunDir
    server: RunDir
    shm: Path

    def via(self, mount: int) -> RunDir:
        return self.mnt1 if mount == 1 else self.mnt2

    def write_queue(self, cells: list[str]) -> None:
        """Create the run through mount 1 (queue.txt, then run.yaml under the environment's knobs)."""
        self.mnt1.root.mkdir()
        self.mnt1.queue.write_text("".join(f"{cell}\n" for cell in cells))
        create_run(self.mnt1.root, self.mnt1.queue)

    def unit(self, key: str) -> Unit:
        return next(u for u in run_units(self.mnt2) if u.key == key)

    def server_names(self) -> list[str]:
        return sorted(os.listdir(self.server.leases))

    def server_lease(self, key: str) -> list[str]:
        """The states in the unit's lease dir on the server (`owner`, `done`, ...), sorted."""
        return sorted(n.split(".")[0] for n in os.listdir(self.server.leases / key))

    def mnt2_view(self, key: str) -> list:
        """What mount 2 believes: the lease dir's listing, and whether `<key>.done` exists."""
        return [sorted(os.listdir(self.mnt2.leases / key)), os.path.exists(self.mnt2.leases / f"{key}.done")]

    def done_by(self, key: str) -> str | None:
        """The worker whose owner record became `<key>/done.<gen>` (read on the server), or None."""
        done = [n for n in os.listdir(self.server.leases / key) if n.startswith("done.")]
        return json.loads((self.server.leases / key / done[0]).read_text()).get("worker") if done else None


def become(hostname: str) -> None:
    """This process (and its children) as another host: a UTS namespace with its own hostname."""
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUTS) != 0:
        raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWUTS) for hostname {hostname}")
    socket.sethostname(hostname)


def ttl_passed() -> float:
    """Long enough without a heartbeat for any judge to call a lease dead (plus a margin)."""
    return knobs.get_float("LEASE_TTL") + knobs.get_float("LEASE_SKEW_S") + 1.0


def _claim_all(run: RunDir, worker: str, out: Path, gate) -> None:
    queue = open_queue(run, worker, Settings.from_env(os.environ))
    gate.wait()  # every process starts claiming at once, so that they really contend
    with open(out, "w") as handle:
        while (lease := queue.claim()) is not None:
            handle.write(lease.unit.key + "\n")
            time.sleep(0.002)
            assert queue.mark(lease, done=True), f"{worker} lost {lease.unit.key}"


def _hold(run: RunDir, worker: str, hostname: str | None, ready: Path, result: Path, seconds: float) -> None:
    """Claim one unit, say which, hold it up to `seconds` (or until lost), then try to mark it done."""
    if hostname:
        become(hostname)
    queue = open_queue(run, worker, Settings.from_env(os.environ))
    lease = queue.claim()
    assert lease is not None, "nothing to claim"
    staged = ready.with_name(ready.name + ".tmp")  # renamed whole: the host never reads a half-written key
    staged.write_text(lease.unit.key)
    os.replace(staged, ready)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not lease.lost.is_set():
        time.sleep(0.05)
    result.write_text(json.dumps({"lost": lease.lost.is_set(), "marked": queue.mark(lease, done=True)}))


def _start_holder(v: Views, mount: int, hostname: str | None, seconds: float) -> tuple[mp.Process, str]:
    ready, result = v.shm / "ready", v.shm / "result"
    proc = CTX.Process(target=_hold, args=(v.via(mount), "holder", hostname, ready, result, seconds))
    proc.start()
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.is_alive() and time.monotonic() < deadline, "the holder did not claim"
        time.sleep(0.05)
    return proc, ready.read_text()


def claims(v: Views, processes: str = "6") -> dict[str, Any]:
    """N processes, alternately on mount 1 and mount 2, claim and finish every unit."""
    v.write_queue([f"scene{i % 3} task{i}" for i in range(30)])
    outs = {f"m{i % 2 + 1}w{i}": v.shm / f"claims{i}" for i in range(int(processes))}
    gate = CTX.Barrier(len(outs))
    procs = [
        CTX.Process(target=_claim_all, args=(v.via(int(wid[1])), wid, out, gate)) for wid, out in outs.items()
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(300)
    keys = sorted(u.key for u in run_units(v.mnt1))
    refused = {}
    for mount in (1, 2):  # a finished unit's dir stays: no mkdir from either node may claim it again
        refused[mount] = sum(_mkdir_refused(v.via(mount).leases / key) for key in keys)
    names = v.server_names()
    return {
        "exitcodes": [proc.exitcode for proc in procs],
        "claims": {wid: out.read_text().split() if out.exists() else [] for wid, out in outs.items()},
        "units": keys,
        "server_done_hints": sorted(n[: -len(".done")] for n in names if n.endswith(".done")),
        "server_dot_names": [n for n in names if n.startswith(".")],
        "server_lease_contents": {k: v.server_lease(k) for k in keys},
        "mkdir_refused": refused,
    }


def _mkdir_refused(path: Path) -> bool:
    try:
        os.mkdir(path)
    except FileExistsError:
        return True
    return False


def stopped_owner(v: Views) -> dict[str, Any]:
    """Node 1 holds a lease and beats; node 2 must not reap it. Node 1 is then frozen: node 2 reaps
    it only after LEASE_TTL, re-claims it, and node 1, resumed, finds itself fenced."""
    v.write_queue(["s u0", "s u1"])
    holder, key = _start_holder(v, 1, "node1", seconds=120)
    facts: dict[str, Any] = {"key": key}
    other = open_queue(v.mnt2, "other", Settings.from_env(os.environ))
    other.refresh()
    time.sleep(ttl_passed())  # longer than LEASE_TTL: only node 1's heartbeats keep the lease
    facts["reaped_while_beating"] = other.reap_pass()
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        facts["reaped_at_once_when_stopped"] = other.reap_pass()
        time.sleep(ttl_passed())
        facts["reaped_after_ttl"] = other.reap_pass()
        reclaimer = open_queue(v.mnt2, "reclaimer", Settings.from_env(os.environ), units=[v.unit(key)])
        mine = reclaimer.claim()
        facts["reclaimed"] = mine.unit.key if mine else None
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    holder.join(60)
    facts["holder"] = json.loads((v.shm / "result").read_text()) if (v.shm / "result").exists() else None
    facts["done_by_after_resume"] = v.done_by(key)  # the fenced holder must not have marked it
    facts["reclaimer_marked"] = reclaimer.mark(mine, done=True) if mine else None
    facts["done_by_at_end"] = v.done_by(key)
    return facts


def dead_owner(v: Views, where: str) -> dict[str, Any]:
    """The owner on mount 1 is SIGKILLed; a worker on mount 2 reaps and re-claims its unit. `where`:
    `same-host` (the pid check proves it dead at once) or `other-host` (only LEASE_TTL can tell)."""
    v.write_queue(["s u0", "s u1"])
    holder, key = _start_holder(v, 1, "node1" if where == "other-host" else None, seconds=600)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    other = open_queue(v.mnt2, "other", Settings.from_env(os.environ))
    other.refresh()
    facts: dict[str, Any] = {"key": key, "reaped_at_once": other.reap_pass()}
    if where == "other-host":
        time.sleep(ttl_passed())
        facts["reaped_after_ttl"] = other.reap_pass()
    reclaimer = open_queue(v.mnt2, "reclaimer", Settings.from_env(os.environ), units=[v.unit(key)])
    mine = reclaimer.claim()
    facts["reclaimed"] = mine.unit.key if mine else None
    facts["reclaimer_marked"] = reclaimer.mark(mine, done=True) if mine else None
    facts["done_by"] = v.done_by(key)
    return facts


def crashes(v: Views) -> dict[str, Any]:
    """Errored attempts counted from both mounts; the quarantine seen from the other one, including
    by a worker whose listing predates it."""
    v.write_queue(["s crashy", "s fine"])
    crashy = next(u for u in run_units(v.mnt1) if u.task == "crashy")
    facts: dict[str, Any] = {"quarantined_after": []}
    stale = None
    for attempt, mount in ((1, 1), (2, 2), (3, 1)):  # a different worker, alternating nodes
        if attempt == 3:  # node 2 lists now: two crashes, still claimable
            stale = open_queue(v.mnt2, "stale", Settings.from_env(os.environ), units=[crashy])
            stale.refresh()
        queue = open_queue(v.via(mount), f"w{attempt}", Settings.from_env(os.environ), units=[crashy])
        lease = queue.claim()
        assert lease is not None, f"attempt {attempt}: could not claim {crashy.key}"
        facts["quarantined_after"].append(queue.release_errored(lease, f"boom {attempt}"))
    states = {s.unit.task: s for s in queue_states(v.mnt2, Settings.from_env(os.environ))}
    facts["state_via_mnt2"] = {t: [s.state, s.errored_attempts, s.last_error] for t, s in states.items()}
    late = stale.claim()  # its listing said 2 crashes: the claim itself must see the quarantine
    facts["stale_claim"] = late.unit.key if late else None
    if late:
        stale.mark(late, done=False)
    last = open_queue(v.mnt1, "last", Settings.from_env(os.environ))
    lease = last.claim()
    facts["fresh_claim"] = lease.unit.key if lease else None
    facts["fresh_marked"] = last.mark(lease, done=True) if lease else None
    after = last.claim()
    facts["claim_when_nothing_left"] = after.unit.key if after else None
    facts["server_crash_files"] = sorted(n for n in v.server_names() if ".crash." in n)
    return facts


def done_lease(v: Views) -> dict[str, Any]:
    """A unit finished on node 1 stays finished for node 2, whose caches still hold the lease as it
    was while held (its listing of the lease dir, `<key>.done` absent): its reaper must not take
    the finished lease for a dead one, and no claim may land on it."""
    v.write_queue(["s u0"])
    reaper = open_queue(v.mnt2, "reaper", Settings.from_env(os.environ))
    holder = open_queue(v.mnt1, "holder", Settings.from_env(os.environ))
    lease = holder.claim()
    key = lease.unit.key
    reaper.refresh()
    facts: dict[str, Any] = {"key": key}
    # Anything on node 2 that looked (a status display, an inspect) has the held state cached.
    facts["mnt2_before"] = v.mnt2_view(key)
    facts["holder_marked"] = holder.mark(lease, done=True)
    time.sleep(ttl_passed())  # the owner's last heartbeat is now older than LEASE_TTL
    facts["mnt2_after"] = v.mnt2_view(key)
    facts["reaped"] = reaper.reap_pass()
    facts["server_lease"] = v.server_lease(key)
    facts["server_done_by"] = v.done_by(key)
    again = open_queue(v.mnt2, "again", Settings.from_env(os.environ))
    late = again.claim()
    facts["claim_after"] = late.unit.key if late else None
    stale = reaper.claim()  # its candidates may still name the unit: the claim itself must refuse
    facts["stale_claim_after"] = stale.unit.key if stale else None
    return facts


def _stall_mid_claim(run: RunDir, ready: Path, result: Path) -> None:
    queue = open_queue(run, "stalled", Settings.from_env(os.environ))
    queue.refresh()
    queue._stage()  # the claim is half made: its owner file written, not yet renamed into place
    ready.write_text("staged")
    os.kill(os.getpid(), signal.SIGSTOP)  # an NFS hiccup, swap, a frozen VM: far past LEASE_TTL
    lease = queue.claim()  # resumed: its candidate list still names the unit
    marked = queue.mark(lease, done=True) if lease is not None else False
    result.write_text(json.dumps({"claimed": lease.unit.key if lease else None, "marked": marked}))


def stalled_claim(v: Views) -> dict[str, Any]:
    """Issue 11, item 1 on NFS: node 1 stalls in the middle of a claim; node 2 claims and finishes
    the unit meanwhile. When node 1 resumes, its claim must not succeed (the old two-call claim let
    its owner file land in node 2's lease dir, and both marked the unit done)."""
    v.write_queue(["s u0"])
    ready, result = v.shm / "ready", v.shm / "result"
    proc = CTX.Process(target=_stall_mid_claim, args=(v.mnt1, ready, result))
    proc.start()
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.is_alive() and time.monotonic() < deadline, "the stalled claimant did not stage"
        time.sleep(0.05)
    time.sleep(ttl_passed())
    other = open_queue(v.mnt2, "other", Settings.from_env(os.environ))
    lease = other.claim()
    facts: dict[str, Any] = {"other_claimed": lease.unit.key if lease else None}
    facts["other_marked"] = other.mark(lease, done=True) if lease is not None else False
    os.kill(proc.pid, signal.SIGCONT)
    proc.join(60)
    facts["stalled"] = json.loads(result.read_text())
    facts["server_lease"] = v.server_lease("s__u0__0-4")
    facts["done_by"] = v.done_by("s__u0__0-4")
    return facts


SCENARIOS = {
    "claims": claims, "stopped-owner": stopped_owner, "dead-owner": dead_owner, "crashes": crashes,
    "done-lease": done_lease, "stalled-claim": stalled_claim,
}  # fmt: skip


def main(argv: list[str]) -> None:
    mnt1, mnt2, export = (Path(a) for a in argv[:3])
    name, args = argv[3], argv[4:]
    require_nfs(mnt1, mnt2)
    run = f"{name}-{os.getpid()}"
    shm = Path(tempfile.mkdtemp(prefix=f"nfs-{run}-"))  # the guest's own TMPDIR
    views = Views(RunDir(mnt1 / run), RunDir(mnt2 / run), RunDir(export / run), shm)
    try:
        emit(SCENARIOS[name](views, *args))
    finally:
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
