"""The per-worker loop: one persistent model server, SIMS_PER_WORKER sim slots, each claiming ->
running the missing seeds -> releasing.

Started by `slurm/eval_worker.sh` (one per GPU share, from the node script). The run dir is
$RUN_DIR, else $RUNS_ROOT/$STUDY_RUN. Each log line (stderr; the node script keeps it in
`logs/worker-<id>.log`) names the unit and seed it is about. Each slot (harness/worker/sim_slot.py)
has its own lease queue, progress file and persistent sim process; its claims prefer units of the
task its process already ran, never waiting for one. The worker exits 0 when every unit is done or
quarantined, when its Slurm allocation has no time left for another unit, or on SIGTERM (its leases
released, no record torn); 2 when its environment does not match the run's manifest, 1 when its
model server cannot start, or when WORKER_FAULT_LIMIT attempts in a row failed for a cause that is
not their unit's (harness/worker/faults.py: the model server, or this node), leases released.
Only a unit's own faults count towards its CRASH_LIMIT.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness.config.contract import CODE_REFUSED_EXIT, verify_environment
from harness.config.manifest import ContractMismatch
from harness.config.paths import run_dir
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.config.validate import InputRefused
from harness.episode.records import now_iso_microseconds, read_tree
from harness.episode.serverdial import probe
from harness.process.failures import run_command
from harness.process.stopsignals import StopSignals
from harness.queue import slurmjob
from harness.queue.lease import Lease
from harness.queue.owner import pid_namespace
from harness.queue.units import Unit
from harness.runqueue import run_units
from harness.wire.errors import WireError
from harness.worker import children, faults, slot_count
from harness.worker.episode_costs import seed_costs
from harness.worker.external_server import ExternalServer
from harness.worker.faults import Fault
from harness.worker.model_server_process import ModelServerFailed, ModelServerProcess
from harness.worker.sim_slot import SimSlot, open_slot
from harness.worker.stopping import CellStopper
from harness.worker.unit_records import finished_seeds, missing_seeds, seeds_written_since
from harness.worker.worklog import WorkerLog

MAX_SERVER_RESTARTS = 3  # a model server that keeps dying stops its worker (exit 1), not the run
# + <pid namespace>-<pid>-: a SIGKILLed worker's dir is swept by the next worker of this namespace
TEMP_PREFIX = f"eval-worker-{''.join(c for c in pid_namespace() if c.isdigit())}-"
JOIN_S = 0.5  # the main thread joins slot threads in short waits, so signal handlers run


def run_dir_from_env(settings: Settings) -> RunDir:
    if os.environ.get("RUN_DIR"):
        return RunDir(Path(os.environ["RUN_DIR"]))
    study = settings.study_run
    if not study:
        raise SystemExit("worker: set RUN_DIR, or STUDY_RUN (a run dir name under $RUNS_ROOT)")
    return RunDir(run_dir(study))


class Worker:
    def __init__(self, run: RunDir, worker_id: str, settings: Settings) -> None:
        """`settings`: the worker process's (its children get the environment it was started with,
        plus EVAL_CONTRACT once verified, and build their own)."""
        self.run, self.worker_id, self.settings = run, worker_id, settings
        self.log = WorkerLog(worker_id)
        self.stop = threading.Event()
        children.sweep_dead_temp_dirs(TEMP_PREFIX)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-"))
        self.env = dict(os.environ)
        log = run.logs / f"server-{worker_id}.log"
        self.server: ModelServerProcess | ExternalServer = (
            ExternalServer(self.tmp / "ready.json", log, settings)
            if settings.policy_server
            else ModelServerProcess(self.tmp / "ready.json", log, self.env, settings)
        )
        self.slots: list[SimSlot] = []
        self.units: list[Unit] = []
        self.unit_times: list[float] = []
        self.failure: Exception | None = None  # what stopped a slot thread (raised again by main)
        self.claimed = False  # has any slot claimed a unit yet: the first claim takes the shortest
        self.breaker = faults.Breaker(settings.worker_fault_limit)

    def verify(self) -> None:
        """Refuse to run under a contract other than the run's. A run dir whose manifest cannot be
        read is refused too (ManifestError): reading it decides, never an exists() probe, which a
        stale NFS negative lookup can answer "no" and so turn off the check."""
        contract = verify_environment(self.run.root, probe=probe(self.settings))
        self.env["EVAL_CONTRACT"] = contract  # its children's environment: they read it from there
        self.settings = dataclasses.replace(self.settings, contract=contract)
        self.log(f"contract {contract[:12]} verified against {self.run.manifest}")

    def on_signal(self, signum: int) -> None:
        """SIGTERM/SIGINT, called in ordinary code (harness.process.stopsignals), never in the handler."""
        self.log(f"got signal {signum}: finishing the current step, releasing the lease")
        self.stop.set()

    def add_slot(self) -> SimSlot:
        """One more sim slot: its own lease queue, progress file, writer id and sim process."""
        slot = open_slot(
            self.run, len(self.slots), self.log, self.units, self.env, self.server, self.tmp, self.settings
        )
        self.slots.append(slot)
        return slot

    def main(self) -> int:
        with StopSignals(self.on_signal):  # a handler only raises a flag: a burst cannot deadlock it
            return self.run_all()

    def run_all(self) -> int:
        try:
            count = self.settings.sims_per_worker  # None: auto
            if self.settings.sim_as_server and count != 1:
                raise ValueError("knob SIMS_PER_WORKER: must be 1 with SIM_AS_SERVER=1 (one listening sim)")
            self.verify()
            self.units = run_units(self.run, seed_costs(self.run))  # a bad queue file or seed bank: refused
            self.stopper = CellStopper(self.run, self.units, self.log)
            self.add_slot()
        except ValueError as exc:  # ContractMismatch, ManifestError, QueueFileError, SeedBankError
            self.log(f"refusing to run: {exc}")
            return 2
        end = slurmjob.allocation_end()
        slots = f"{count or 'auto'} sim slots"
        self.log(f"run {self.run.root}: {len(self.units)} units; {slots}; allocation ends {end or 'never'}")
        try:
            self.slots[0].sim.start()  # its imports and renderer start-up overlap the model's load
            info = self.server.ensure(self.settings.model_start_timeout)
            mode = "dials each sim client" if self.server.sim_listens else f"listens on {info['port']}"
            self.log(f"model server pid {info['pid']} loaded {info['policy']} ({mode})")
            self.run_slots(count, end)
            if self.failure is not None:
                raise self.failure
            self.log("no unit left to claim" if not self.stop.is_set() else "stopped")
            return 0
        except (ModelServerFailed, faults.BreakerTripped) as exc:
            self.log(f"cannot run: {exc}")
            return 1
        except ContractMismatch as exc:
            self.log(f"refusing to run: {exc}")
            return 2
        finally:
            for slot in self.slots:
                slot.sim.close()
            self.server.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def run_slots(self, count: int | None, end: float | None) -> None:
        """Run every slot's claim loop in its own thread until the queue is drained or we stop.
        `auto` (count None): slot 0 runs one unit alone first; what it measured picks the count."""
        if count is None:
            first = self.slot_loop(self.slots[0], end, limit=1)
            if first is None or self.stop.is_set():
                return
            count, why = slot_count.choose(slot_count.measure(first))
            self.log(why)
        while len(self.slots) < count:
            self.add_slot()
        threads = [threading.Thread(target=self.guarded_loop, args=(s, end), daemon=True) for s in self.slots]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(JOIN_S)

    def guarded_loop(self, slot: SimSlot, end: float | None) -> None:
        """A slot thread: what stops it (a dead model server, a refused contract) stops every slot."""
        try:
            self.slot_loop(slot, end)
        except Exception as exc:
            if self.failure is None:
                self.failure = exc
            self.stop.set()

    def slot_loop(self, slot: SimSlot, end: float | None, limit: int | None = None) -> list[dict] | None:
        """Claim and run units on `slot` (at most `limit`); the records of the last unit run, if any."""
        records = None
        while not self.stop.is_set() and (limit is None or limit > 0):
            if not slurmjob.time_for_another(end, self.unit_times):
                slot.log("not enough allocation time left for another unit: stopping")
                break
            first = not self.claimed  # the worker's first claim takes the shortest unit: its first
            # result comes soonest; every later one the longest, so the run's tail stays short
            lease = slot.queue.claim(self.stop, slot.has_run, self.stopper.decided, shortest=first)
            while slot.queue.reaped:  # a reclaimed lease leaves a trace on this side too
                slot.log(slot.queue.reaped.pop(0))
            if lease is None:
                break
            self.claimed = True
            started = time.monotonic()
            records = self.work(slot, lease)
            self.unit_times.append(time.monotonic() - started)
            limit = None if limit is None else limit - 1
        return records

    def work(self, slot: SimSlot, lease: Lease) -> list[dict]:
        """One claim: run the unit's missing seeds, then release it, done or not; the unit's records."""
        try:
            return self.run_unit(slot, lease)
        except (ModelServerFailed, ContractMismatch):
            slot.queue.mark(lease, done=False)  # not the unit's fault: no errored attempt counted
            raise

    def run_unit(self, slot: SimSlot, lease: Lease) -> list[dict]:
        unit, log, queue = lease.unit, slot.log, slot.queue
        info = self.server.ensure(self.settings.model_start_timeout)
        starts = self.server.starts
        result_dir = self.run.result_dir(unit.task, info["policy"], unit.task_config, info.get("ckpt", ""))
        resume = self.settings.eval_resume_seeds
        todo = missing_seeds(result_dir, unit) if resume else list(unit.seeds)
        log(f"claimed: {len(todo)} of {len(unit.seeds)} seeds to run", unit)
        fault = self.run_seeds(slot, lease, todo, info, result_dir) if todo else None
        records = read_tree(result_dir).records
        mine = [records[k] for s in unit.seeds if (k := (unit.task, unit.task_config, s)) in records]
        self.stopper.after_unit(unit, records)  # EVAL_STOP: mark the cell if these records decide it
        if lease.lost.is_set():
            log("lease lost (reaped while slow): leaving the unit to its new owner", unit)
            return mine
        if self.stop.is_set():
            queue.mark(lease, done=False)
            return mine
        left = [s for s in unit.seeds if s not in finished_seeds(read_tree(result_dir), unit)]
        if not left:
            ok = queue.mark(lease, done=True)
            log("done" if ok else "lease lost before marking done: not marked", unit)
            self.breaker.record(None)
            return mine
        died = faults.server_down(self.server) is not None or self.server.starts != starts
        self.release_failed(slot, lease, faults.of_attempt(fault, len(left), died))
        return mine

    def release_failed(self, slot: SimSlot, lease: Lease, fault: Fault) -> None:
        """Release a unit whose attempt failed: a unit fault counts towards its CRASH_LIMIT, any other
        cause does not, but counts towards this worker's breaker (which may stop it)."""
        unit, log = lease.unit, slot.log
        if fault.cause != faults.UNIT:
            log(f"{fault}: retrying later, not charged to the unit", unit)
            slot.queue.mark(lease, done=False)
            if self.server.starts - 1 >= MAX_SERVER_RESTARTS:
                died = self.server.starts - 1
                raise ModelServerFailed(f"model server died {died} times: see {self.server.log}")
        elif slot.queue.release_errored(lease, str(fault)):
            log(f"quarantined after {slot.queue.errored_attempts[unit.key]} errored attempts: {fault}", unit)
        else:
            log(f"errored attempt {slot.queue.errored_attempts[unit.key]}: {fault}", unit)
        self.breaker.record(fault)

    def run_seeds(
        self, slot: SimSlot, lease: Lease, seeds: list[int], info: dict, result_dir: Path
    ) -> Fault | None:
        """Run the sim process until every seed of this pass was attempted once, or a fault that is
        not the unit's ends the pass; what went wrong last (None when nothing did)."""
        unit = lease.unit
        deadline = time.monotonic() + self.settings.per_task_timeout
        todo, fault = list(seeds), None
        # a beat before each assignment: a worker resumed from a freeze learns at once that it lost the lease
        while todo and not self.stop.is_set() and lease.beat():
            info = self.server.ensure(self.settings.model_start_timeout)
            started, since = time.monotonic(), now_iso_microseconds()
            stall = self.settings.stall_timeout
            outcome = slot.sim.run(
                slot.assignment(self.run.root, unit, todo), slot.line_logger(unit), slot.progress,
                stall, deadline, [self.stop, lease.lost], peer_alive=self.server.alive,
            )  # fmt: skip
            if outcome.returncode == CODE_REFUSED_EXIT and outcome.killed is None:
                raise ContractMismatch("the sim client refused to run (its log line above says why)", [])
            if slot.sim.alive():
                slot.ran.add((unit.task, unit.task_config))
            recorded = seeds_written_since(self.run, unit, info, slot.writer_id, since, todo)
            wall_s = time.monotonic() - started
            slot.settle(self.run, unit, outcome, todo, recorded, info, wall_s)
            stopped = outcome.worker_stopped  # the seeds left run again if the next beat keeps the lease
            if not stopped:
                fault = faults.classify(outcome, faults.server_down(self.server)) or fault
            if outcome.killed == "stalled" and self.server.kill_if_stopped():  # hung: ensure() restarts it
                slot.log("the episode stalled on a stopped model server: restarting the server", unit)
            attempted = recorded | ({outcome.seed} if outcome.seed is not None and not stopped else set())
            if (fault is not None and fault.cause != faults.UNIT) or outcome.killed == "unit timeout":
                break  # not the unit's fault: no later seed can run either; or the unit is out of time
            if not attempted & set(todo) and not stopped:
                break  # the client could not run at all
            todo = [s for s in todo if s not in attempted]
        return fault


def main() -> int:
    worker_id = os.environ.get("WORKER_ID") or f"{socket.gethostname()}-{os.getpid()}"
    try:  # every knob this worker's node sets, against its declared type and range: all named at once
        settings = Settings.from_env(os.environ)
    except InputRefused as exc:
        log = WorkerLog(worker_id)
        for problem in exc.problems:
            log(f"refusing to run: {problem}")
        return 2
    return Worker(run_dir_from_env(settings), worker_id, settings).main()


if __name__ == "__main__":
    sys.exit(run_command("worker", main, failures=(WireError,)))
