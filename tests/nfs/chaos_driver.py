"""Guest side of tests/nfs/test_nfs_chaos.py: a pool split over two NFS client mounts, under fire.

    python -m nfs.chaos_driver MNT1 MNT2 EXPORT [--workers N --cells N ...]

Half the workers (`slurm/eval_worker.sh`, as a node starts them) see the run dir through MNT1 as
host `node1`, half through MNT2 as `node2` (a UTS namespace each: a node's dead pids are provable
only on that node). A killer SIGKILLs random workers, model servers and sim clients (a killed
worker is restarted, as a requeue would), `--kills` of them and then no more: restarts take most of
the guest's one CPU, and under kills that never stopped a slow host did not finish in 420 s. Once,
one worker is SIGSTOPped while it holds a lease, until another worker has reaped that lease (past
LEASE_TTL), then SIGCONTed. When every unit is done or quarantined the run is judged on EXPORT, the
server's own files: the facts (nfs.facts) are the figures, what the frozen worker wrote after it
lost its lease, and the processes of the run still alive once its workers are gone (`leftovers`:
there must be none). Knobs: the environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.config.rundir import RunDir
from harness.episode.records import check_record, read_tree, record_files, record_key
from harness.queue.listing import scan
from harness.queue.units import Unit
from harness.runqueue import run_units
from harness.worker.loop import TEMP_PREFIX
from nfs.facts import REPO, emit, require_nfs
from support.leftovers import wait_for_no_leftovers
from support.poolkit import check_finished, make_run, pool_env, stop_group

ROLES = {"policy_model_server": "server", "eval_policy_client": "simclient"}
KILLED = ("worker", *ROLES.values())
# pool_env's knobs that the environment may set (the host-side test does): they override its defaults
POOL_KNOBS = ("LEASE_TTL", "LEASE_SKEW_S", "HEARTBEAT_S", "STALL_TIMEOUT", "CRASH_LIMIT", "FASTBENCH_STEPS")
POOL_KNOBS += ("FASTBENCH_STEP_MS", "SIMS_PER_WORKER")
CRASHING = "crash0"


def iso(t: float) -> str:
    """A wall-clock time in the records' finished_at format (comparable as strings)."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="microseconds")


def children(pids: set[int]) -> dict[str, list[int]]:
    """Model servers and sim clients whose parent is one of `pids`, by role."""
    found: dict[str, list[int]] = {"server": [], "simclient": []}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_bytes().rsplit(b")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        role = next((r for marker, r in ROLES.items() if marker in cmdline), None) if ppid in pids else None
        if role:
            found[role].append(int(stat.parent.name))
    return found


class Pool:
    """The worker slots: slot i runs on node 1 + i % 2; a slot's worker is restarted when it dies."""

    def __init__(self, envs: dict[int, dict[str, str]], logs: Path, workers: int) -> None:
        self.envs, self.logs, self.workers = envs, logs, workers
        self.procs: dict[int, subprocess.Popen] = {}
        self.ids: dict[int, str] = {}
        self.incarnations: Counter = Counter()
        self.exits: list[tuple[str, int, str]] = []  # (worker, status, last log line) of each mid-run end

    @staticmethod
    def node(slot: int) -> int:
        return 1 + slot % 2

    def start(self, slot: int) -> None:
        self.incarnations[slot] += 1
        node = self.node(slot)
        wid = f"n{node}s{slot}i{self.incarnations[slot]}"
        with open(self.logs / f"worker-{wid}.log", "ab") as out:
            self.procs[slot] = subprocess.Popen(
                ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec bash "$1"', f"node{node}",
                 str(REPO / "slurm" / "eval_worker.sh")],
                env={**self.envs[node], "WORKER_ID": wid}, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.ids[slot] = wid

    def restart_dead(self) -> None:
        """Restart each worker that died; one that exited 0 saw nothing left to claim and stays ended."""
        for slot, proc in list(self.procs.items()):
            if proc.returncode is None and proc.poll() is not None and proc.returncode != 0:
                self.exits.append((self.ids[slot], proc.returncode, self.last_line(slot)))
                self.start(slot)

    def last_line(self, slot: int) -> str:
        lines = (self.logs / f"worker-{self.ids[slot]}.log").read_text().splitlines()
        return lines[-1] if lines else ""

    def live(self, exclude: set[int] = frozenset()) -> set[int]:
        return {p.pid for p in self.procs.values() if p.poll() is None and p.pid not in exclude}

    def slot_of(self, wid: str) -> int | None:
        return next((s for s, w in self.ids.items() if w == wid and self.procs[s].poll() is None), None)


def finished(server: RunDir, units: list[str], crash_limit: int) -> set[str]:
    """Units whose lease dir holds their end state (done or quarantined), read on the server."""
    crashes = scan(server.leases).errored_attempts
    out = set()
    for key in units:
        try:
            names = os.listdir(server.leases / key)
        except FileNotFoundError:
            names = []
        if any(n.startswith(("done.", "quarantined.")) for n in names) or crashes.get(key, 0) >= crash_limit:
            out.add(key)
    return out


def holders(server: RunDir) -> dict[str, tuple[str, str]]:
    """worker id → (unit key, generation) of every lease held now, from the owner files on the server."""
    held = {}
    for key in os.listdir(server.leases) if server.leases.exists() else []:
        if key.startswith(".") or not (server.leases / key).is_dir():
            continue
        for name in os.listdir(server.leases / key):
            if name.startswith("owner."):
                with contextlib.suppress(OSError, ValueError, KeyError):  # renamed by a beat this instant
                    owner = json.loads((server.leases / key / name).read_text())
                    held[owner["worker"]] = (key, name.split(".")[1])
    return held


def still_held(server: RunDir, key: str, generation: str) -> bool:
    try:
        return any(n.startswith(f"owner.{generation}.") for n in os.listdir(server.leases / key))
    except FileNotFoundError:
        return False


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("mnt1", "mnt2", "export"):
        p.add_argument(name, type=Path)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--cells", type=int, default=30, help="good cells (plus one that always crashes)")
    p.add_argument("--seeds", type=int, default=4, help="EVAL_TEST_NUM")
    p.add_argument("--unit-seeds", type=int, default=2, help="UNIT_SEEDS")
    p.add_argument("--kill-every", type=float, nargs=2, default=(2.0, 5.0), help="seconds between kills")
    p.add_argument("--kills", type=int, default=20, help="then no more, once every role has had one")
    p.add_argument("--freeze-at", type=float, default=0.3, help="share of units done when one is frozen")
    p.add_argument("--deadline", type=float, default=420)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    require_nfs(args.mnt1, args.mnt2)
    name = f"chaos-{os.getpid()}"
    cells = [(f"scene{i % 5}", f"task{i}") for i in range(args.cells)] + [("scene0", CRASHING)]
    make_run(args.mnt1 / name, cells)
    server = RunDir(args.export / name)
    logs = args.mnt1.parent / "logs" / name  # guest and host see it (hostfs): kept until uml.py down
    logs.mkdir(parents=True)
    knobs = {k: os.environ[k] for k in POOL_KNOBS if k in os.environ}
    knobs.update(EVAL_TEST_NUM=str(args.seeds), UNIT_SEEDS=str(args.unit_seeds), FASTBENCH_CRASH=CRASHING)
    envs = {node: pool_env(RunDir(mnt / name), **knobs) for node, mnt in ((1, args.mnt1), (2, args.mnt2))}
    ttl = float(envs[1]["LEASE_TTL"]) + float(envs[1]["LEASE_SKEW_S"])
    crash_limit = int(envs[1]["CRASH_LIMIT"])
    os.environ.update(envs[2])  # the knobs decide the plan
    units = run_units(RunDir(args.mnt2 / name))
    keys = [u.key for u in units]
    by_key = {u.key: u for u in units}
    pool = Pool(envs, logs, args.workers)
    rng = random.Random(args.seed)
    kills: Counter = Counter()
    frozen: dict[str, Any] = {}
    frozen_slot: int | None = None
    freeze_from = 0.0
    start = time.time()
    for slot in range(args.workers):
        pool.start(slot)
    next_kill = time.monotonic() + rng.uniform(*args.kill_every)
    try:
        while len(done := finished(server, keys, crash_limit)) < len(keys):
            if time.time() - start > args.deadline:
                raise SystemExit(f"chaos run not finished after {args.deadline:g} s: {len(done)}/{len(keys)}")
            pool.restart_dead()
            if not frozen and len(done) >= args.freeze_at * len(keys):
                freeze_from = freeze_from or time.time()
                anytime = time.time() - freeze_from > 30  # no mid-episode moment came: take any
                frozen_slot = freeze(pool, server, by_key, frozen, anytime)
            frozen_pid = pool.procs[frozen_slot].pid if frozen_slot is not None else None
            if frozen_pid and "t_reaped" not in frozen:
                if not any(still_held(server, k, g) for k, g in frozen["held"]):
                    frozen["t_reaped"] = time.time()  # observed on the server: just after the reap
                elif time.time() - frozen["t_stop"] > ttl + 60:
                    frozen["t_reaped"] = None  # never reaped: the facts say so
            elif frozen_pid and "t_cont" not in frozen and time.time() > (frozen["t_reaped"] or 0) + 1:
                os.kill(frozen_pid, signal.SIGCONT)
                frozen["t_cont"] = time.time()
            spent = sum(kills.values()) >= args.kills
            if time.monotonic() >= next_kill and not (spent and len(kills) == len(KILLED)):
                exclude = {frozen_pid} if frozen_pid and "t_cont" not in frozen else set()
                live = pool.live(exclude)
                targets = {"worker": sorted(live), **children(live)}
                if spent:  # only the roles not hit yet
                    targets = {r: pids for r, pids in targets.items() if r not in kills}
                role = rng.choice([r for r, pids in targets.items() if pids] or ["worker"])
                if targets.get(role):
                    os.kill(rng.choice(targets[role]), signal.SIGKILL)
                    kills[role] += 1
                next_kill = time.monotonic() + rng.uniform(*args.kill_every)
            time.sleep(0.1)
        wall = time.time() - start
        pool.restart_dead()  # a kill in the loop's last pass: its slot's next incarnation finds nothing left
        if frozen_slot is not None and "t_cont" not in frozen:
            os.kill(pool.procs[frozen_slot].pid, signal.SIGCONT)
        # they see nothing left, or a kill in the loop's last passes stopped them (their last line says)
        ends = [(pool.ids[s], proc.wait(90), pool.last_line(s)) for s, proc in pool.procs.items()]
    finally:
        for proc in pool.procs.values():
            stop_group(proc)
    facts = judge(server, envs[2], units, pool, kills, frozen, wall, ends, args.mnt2 / name, logs)
    facts["leftovers"] = wait_for_no_leftovers(name)  # the run is in every worker's RUN_DIR, and theirs
    emit(facts)


def freeze(pool: Pool, server: RunDir, units: dict[str, Unit], frozen: dict[str, Any], anytime: bool):
    """SIGSTOP a worker that holds a lease of a good unit, while its sim client runs an episode that
    is not the unit's last (its client must neither record that episode nor start another);
    `anytime`: at any moment of the unit. None (try later) if none qualifies."""
    for wid, (key, generation) in holders(server).items():
        slot = pool.slot_of(wid)
        if slot is None or CRASHING in key:
            continue
        running = episode_running(pool.procs[slot].pid)
        if anytime or (running is not None and running != units[key].seeds[-1]):
            os.kill(pool.procs[slot].pid, signal.SIGSTOP)
            frozen.update(worker=wid, held=[(key, generation)], t_stop=time.time(), running_seed=running)
            return slot
    return None


def episode_running(worker_pid: int) -> int | None:
    """The seed the worker's sim client is stepping right now (a slot's progress file, fresh), if any.
    The sim client writes an episode's start at once and its steps at most every 0.5 s."""
    for path in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}{worker_pid}-*/progress-*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            if time.time() - path.stat().st_mtime < 1.0:
                return int(json.loads(path.read_text())["seed"])
    return None


def raw_records(server: RunDir) -> list[dict[str, Any]]:
    """Every whole, valid record line on the server, before dedup (a torn last line is left out)."""
    out = []
    for path in record_files(server.results):
        for line in path.read_bytes().split(b"\n")[:-1]:  # the last piece has no newline: torn or empty
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                check_record(record)
                out.append(record)
    return out


def judge(server, env, units, pool, kills, frozen, wall, ends, mnt2_root, logs) -> dict[str, Any]:
    """The figures and the checks, all read on the server."""
    records = read_tree(server.results)
    raw = raw_records(server)
    planned = {(u.task, u.task_config, s): u for u in units for s in u.seeds}
    quarantined = {u.key for u in units if u.task == CRASHING}
    results = {k: r for k, r in records.records.items() if r["error"] is None}
    lost = [k for k, u in planned.items() if u.key not in quarantined and k not in results]
    per_seed = Counter((task, seed) for task, _config, seed in records.records)
    double = [k for k in records.records if k not in planned] + [k for k, n in per_seed.items() if n > 1]
    trials = Counter(record_key(r) for r in raw if r["error"] is None)
    try:
        check_finished(server, env, {CRASHING})
        verdict = "ok"
    except AssertionError as exc:
        verdict = f"check_finished: {exc}"
    return {
        "workers": pool.workers, "nodes": Counter(pool.node(s) for s in range(pool.workers)),
        "incarnations": sum(pool.incarnations.values()), "mid_run_exits": pool.exits, "final_exits": ends,
        "units": len(units), "planned_seeds": len(planned), "kills": dict(kills), "wall_s": round(wall, 1),
        "records": len(records.records), "raw_records": len(raw),
        "duplicates": len(raw) - len(records.records),
        "rerun_successes": sum(n > 1 for n in trials.values()), "torn": records.torn_lines,
        "bad": records.bad_lines, "lost": lost, "double": double, "check_finished": verdict,
        "mnt2_records": len(read_tree(mnt2_root / "eval_result").records),
        "frozen": judge_frozen(server, units, frozen, raw, logs),
    }  # fmt: skip


def judge_frozen(server: RunDir, units, frozen: dict[str, Any], raw, logs: Path) -> dict[str, Any]:
    """What the frozen worker did to the unit it held: who marked it done under which lease, and its
    records of it. Once thawed, it may claim the reaped unit afresh (a new lease) and run it: what
    counts against it is a done mark under the frozen lease, or a record after the reap that
    comes before its fresh claim."""
    generations = dict(frozen.get("held", []))
    seeds = {(u.task, u.task_config, s) for u in units if u.key in generations for s in u.seeds}
    mine = [r for r in raw if r["worker"] == frozen.get("worker") and record_key(r) in seeds]
    reaped = frozen.get("t_reaped")
    done_by = {}  # the worker and lease whose owner file became the unit's end state
    for key in generations:
        names = [n for n in os.listdir(server.leases / key) if n.startswith(("done.", "quarantined."))]
        owner = json.loads((server.leases / key / names[0]).read_text()) if names else None
        done_by[key] = None if owner is None else {k: owner[k] for k in ("worker", "generation")}
    log = logs / f"worker-{frozen.get('worker')}.log"
    text = log.read_text() if log.exists() else ""
    lines = [line for line in text.splitlines() if any(key in line for key in generations)]
    # its fresh claim: the first claim logged after it was thawed (log times are whole seconds, and
    # a record of the frozen lease could only be committed on thawing, seconds before any claim)
    thawed = iso(frozen["t_cont"]).split(".")[0] if frozen.get("t_cont") else None
    claims = [line.split(" ", 1)[0] for line in lines if " claimed:" in line]
    fresh = next((t for t in claims if t.split("+")[0] >= thawed), None) if thawed else None
    return {
        **{k: v for k, v in frozen.items() if k != "held"}, "held": sorted(generations),
        "held_generations": generations, "done_by": done_by, "fresh_claim": fresh,
        "frozen_s": round((frozen.get("t_cont") or 0) - frozen.get("t_stop", 0), 1),
        "t_reaped_iso": iso(reaped) if reaped else None,
        "records_for_held_unit": [(r["seed"], r["finished_at"], r["error"]) for r in mine],
        "records_after_reap": [
            r["finished_at"] for r in mine
            if reaped and r["finished_at"] > iso(reaped) and (fresh is None or r["finished_at"] < fresh)
        ],
        "log": lines[-12:],
    }  # fmt: skip


if __name__ == "__main__":
    main()
