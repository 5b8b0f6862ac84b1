"""The per-worker loop: one persistent model server, then claim -> run missing seeds -> release.

Started by `slurm/eval_worker.sh` (one per GPU slot, from the node script). The run dir is
$RUN_DIR, else $RUNS_ROOT/$STUDY_RUN. Each log line (stderr; the node script keeps it in
`logs/worker-<id>.log`) names the unit and seed it is about. The worker exits 0 when every unit
is done or quarantined, when its Slurm allocation has no time left for another unit, or on
SIGTERM (its lease released, no record torn); 2 when its environment does not match the run's
manifest, 1 when its model server cannot start.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from harness.config import knobs
from harness.config.contract import CODE_REFUSED_EXIT, verify_environment
from harness.config.failures import run_command
from harness.config.manifest import ContractMismatch
from harness.config.paths import run_dir
from harness.config.plan import open_queue
from harness.config.rundir import RunDir
from harness.episode.records import RecordSet, append_record, read_tree
from harness.queue import slurmjob
from harness.queue.lease import Lease
from harness.queue.leases import LeaseQueue
from harness.queue.owner import pid_namespace
from harness.queue.units import Unit
from harness.worker import children
from harness.worker.external_server import ExternalServer
from harness.worker.model_server_process import ModelServerError, ModelServerProcess
from harness.worker.sim_process import SimOutcome, read_progress, run_sim

MAX_SERVER_RESTARTS = 3  # a model server that keeps dying stops its worker (exit 1), not the run
# + <pid namespace>-<pid>-: a SIGKILLed worker's dir is swept by the next worker of this namespace
TEMP_PREFIX = f"eval-worker-{''.join(c for c in pid_namespace() if c.isdigit())}-"
SEED_IN_LINE = re.compile(r"\bseed (\d+)\b")


def now_iso() -> str:
    """The records' finished_at format (ISO 8601 UTC), comparable as strings."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


class WorkerLog:
    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id

    def __call__(self, message: str, unit: Unit | None = None, seed: int | None = None) -> None:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        where = f" unit={unit.key}" if unit else ""
        where += f" seed={seed}" if seed is not None else ""
        print(f"{stamp} worker={self.worker_id}{where} {message}", file=sys.stderr, flush=True)


def run_dir_from_env() -> RunDir:
    if os.environ.get("RUN_DIR"):
        return RunDir(Path(os.environ["RUN_DIR"]))
    study = knobs.get("STUDY_RUN")
    if not study:
        raise SystemExit("worker: set RUN_DIR, or STUDY_RUN (a run dir name under $RUNS_ROOT)")
    return RunDir(run_dir(study))


def finished_seeds(records: RecordSet, unit: Unit) -> set[int]:
    """Seeds of `unit` whose latest record is a result (a policy success or failure), not an error."""
    return {
        seed
        for seed in unit.seeds
        if (rec := records.records.get((unit.task, unit.task_config, seed))) is not None
        and rec.get("error") is None
    }


def missing_seeds(result_dir: Path, unit: Unit) -> list[int]:
    """The seeds still to run: never recorded, or whose latest record is an errored episode."""
    done = finished_seeds(read_tree(result_dir), unit)
    return [seed for seed in unit.seeds if seed not in done]


def errored_record(unit: Unit, seed: int, error: str, info: dict, worker: str, wall_s: float) -> dict:
    """The record of an episode the worker had to kill: counted apart, retried on a later pass."""
    return {
        "task": unit.task, "scene": unit.scene, "task_config": unit.task_config, "seed": seed,
        "success": False, "hard_success": False, "error": error, "steps": 0, "wall_s": wall_s,
        "sim_s": 0.0, "model_s": 0.0, "policy": info.get("policy", knobs.get("POLICY")),
        "ckpt": info.get("ckpt", ""), "host": socket.gethostname(), "worker": worker, "sim_version": "",
        "contract": os.environ.get("EVAL_CONTRACT", ""), "video": None,
        "finished_at": now_iso(),
    }  # fmt: skip


class Worker:
    def __init__(self, run: RunDir, worker_id: str) -> None:
        self.run, self.worker_id = run, worker_id
        self.log = WorkerLog(worker_id)
        self.stop = threading.Event()
        children.sweep_dead_temp_dirs(TEMP_PREFIX)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-"))
        self.env = dict(os.environ)
        log = run.logs / f"server-{worker_id}.log"
        self.server: ModelServerProcess | ExternalServer = (
            ExternalServer(self.tmp / "ready.json", log)
            if knobs.get("POLICY_SERVER")
            else ModelServerProcess(self.tmp / "ready.json", log, self.env)
        )
        self.progress = self.tmp / "progress.json"
        self.unit_times: list[float] = []

    def verify(self) -> None:
        """Refuse to run under a contract other than the run's (when the run has a manifest)."""
        if self.run.manifest.exists():
            self.env["EVAL_CONTRACT"] = verify_environment(self.run.root)
            os.environ["EVAL_CONTRACT"] = self.env["EVAL_CONTRACT"]
            self.log(f"contract {self.env['EVAL_CONTRACT'][:12]} verified against {self.run.manifest}")
        else:
            self.log(f"no {self.run.manifest}: running without a contract check")

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.log(f"got signal {signum}: finishing the current step, releasing the lease")
        self.stop.set()

    def time_for_another(self, end: float | None) -> bool:
        """Inside an allocation, claim only a unit that the mean unit time says can still finish."""
        if end is None or not self.unit_times:
            return True
        mean = sum(self.unit_times) / len(self.unit_times)
        return time.time() + 1.2 * mean < end

    def main(self) -> int:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        try:
            knobs.get_choice("QUEUE_MODE", knobs.QUEUE_MODES)
            self.verify()
            queue = open_queue(self.run, self.worker_id)  # a bad queue file or seed bank: refused
        except ValueError as exc:  # ContractMismatch, ManifestError, QueueFileError, SeedBankError, knobs
            self.log(f"refusing to run: {exc}")
            return 2
        units = queue.units
        end = slurmjob.allocation_end()
        self.log(f"run {self.run.root}: {len(units)} units; allocation ends {end or 'never'}")
        try:
            info = self.server.ensure(knobs.get_float("MODEL_START_TIMEOUT"))
            mode = "dials each sim client" if self.server.sim_listens else f"listens on {info['port']}"
            self.log(f"model server pid {info['pid']} loaded {info['policy']} ({mode})")
            while not self.stop.is_set():
                if not self.time_for_another(end):
                    self.log("not enough allocation time left for another unit: stopping")
                    break
                lease = queue.claim(self.stop)
                if lease is None:
                    break
                started = time.monotonic()
                self.work(queue, lease)
                self.unit_times.append(time.monotonic() - started)
            self.log("no unit left to claim" if not self.stop.is_set() else "stopped")
            return 0
        except ModelServerError as exc:
            self.log(f"cannot run: {exc}")
            return 1
        except ContractMismatch as exc:
            self.log(f"refusing to run: {exc}")
            return 2
        finally:
            self.server.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def work(self, queue: LeaseQueue, lease: Lease) -> None:
        """One claim: run the unit's missing seeds, then release it, done or not."""
        try:
            self.run_unit(queue, lease)
        except (ModelServerError, ContractMismatch):
            queue.mark(lease, done=False)  # not the unit's fault: no crash counted
            raise

    def run_unit(self, queue: LeaseQueue, lease: Lease) -> None:
        unit = lease.unit
        info = self.server.ensure(knobs.get_float("MODEL_START_TIMEOUT"))
        starts = self.server.starts
        result_dir = self.run.result_dir(unit.task, info["policy"], unit.task_config, info.get("ckpt", ""))
        resume = knobs.get_bool("EVAL_RESUME_SEEDS")
        todo = missing_seeds(result_dir, unit) if resume else list(unit.seeds)
        self.log(f"claimed: {len(todo)} of {len(unit.seeds)} seeds to run", unit)
        error = self.run_seeds(lease, todo, info, result_dir) if todo else None
        if lease.lost.is_set():
            self.log("lease lost (reaped while slow): leaving the unit to its new owner", unit)
            return
        if self.stop.is_set():
            queue.mark(lease, done=False)
            return
        left = [s for s in unit.seeds if s not in finished_seeds(read_tree(result_dir), unit)]
        if not left:
            ok = queue.mark(lease, done=True)
            self.log("done" if ok else "lease lost before marking done: not marked", unit)
            return
        reason = error or f"{len(left)} seeds errored"
        if not self.server.alive() or self.server.starts != starts:
            self.log(f"model server died during the unit ({reason}): retrying later, not a crash", unit)
            queue.mark(lease, done=False)
            if self.server.starts - 1 >= MAX_SERVER_RESTARTS:
                died = self.server.starts - 1
                raise ModelServerError(f"model server died {died} times: see {self.server.log}")
        elif queue.release_errored(lease, reason):
            self.log(f"quarantined after {queue.crashes[unit.key]} errored attempts: {reason}", unit)
        else:
            self.log(f"errored attempt {queue.crashes[unit.key]}: {reason}", unit)

    def run_seeds(self, lease: Lease, seeds: list[int], info: dict, result_dir: Path) -> str | None:
        """Run the sim client until every seed of this pass was attempted; the last error, if any."""
        unit = lease.unit
        deadline = time.monotonic() + knobs.get_float("PER_TASK_TIMEOUT")
        todo, error = list(seeds), None
        # a beat before each client: a worker resumed from a freeze learns at once that it lost the lease
        while todo and not self.stop.is_set() and lease.beat():
            info = self.server.ensure(knobs.get_float("MODEL_START_TIMEOUT"))
            started, since = time.monotonic(), now_iso()
            stall = knobs.get_float("STALL_TIMEOUT")
            cancel = [self.stop, lease.lost]
            relay = self.sim_line_logger(unit)
            outcome = run_sim(
                self.sim_argv(unit, todo), self.env, relay, self.progress, stall, deadline, cancel,
                peer_alive=self.server.alive,
            )  # fmt: skip
            if outcome.returncode == CODE_REFUSED_EXIT and outcome.killed is None:
                raise ContractMismatch("the sim client refused to run (its log line above says why)", [])
            records = read_tree(result_dir).records
            recorded = {  # seeds this run of the client wrote a record for
                s
                for s in todo
                if str(records.get((unit.task, unit.task_config, s), {}).get("finished_at", "")) >= since
            }
            error = self.after_sim(unit, outcome, todo, recorded, info, time.monotonic() - started) or error
            attempted = recorded | ({outcome.seed} if outcome.seed is not None else set())
            if not attempted & set(todo) or outcome.killed == "unit timeout":
                break  # the client could not run at all, or the unit is out of time
            todo = [s for s in todo if s not in attempted]
        return error

    def after_sim(
        self, unit: Unit, outcome: SimOutcome, todo: list[int], recorded: set[int], info: dict, wall_s: float
    ) -> str | None:
        """Log the client's end; record the running episode as errored if the client was killed."""
        if outcome.returncode == 0 and outcome.killed is None:
            self.log(f"sim client finished {len(todo)} seeds", unit)
            return None
        why = outcome.killed or f"sim client exited with {outcome.returncode}"
        if outcome.killed == "cancelled":
            self.log("sim client stopped", unit, outcome.seed)
            return None
        seed = outcome.seed
        if seed is None:  # killed before its first step: the first seed without a record was running
            seed = next((s for s in todo if s not in recorded), None)
        if seed is not None and seed not in recorded:
            path = self.run.metrics_file(
                unit.task, info["policy"], unit.task_config, info.get("ckpt", ""), f"{self.worker_id}.worker"
            )
            append_record(path, errored_record(unit, seed, why, info, self.worker_id, wall_s))
            self.log(f"{why}: episode recorded as errored", unit, seed)
        else:
            self.log(f"{why}: no episode was running, nothing recorded", unit, seed)
        return why

    def sim_line_logger(self, unit: Unit) -> Callable[[str], None]:
        """The sim client's output goes into this worker's log, each line tagged with unit and seed."""

        def relay(line: str) -> None:
            seed = SEED_IN_LINE.search(line)
            self.log(f"sim: {line}", unit, int(seed.group(1)) if seed else read_progress(self.progress)[1])

        return relay

    def sim_argv(self, unit: Unit, seeds: list[int]) -> list[str]:
        root = Path(self.env.get("EVAL_ROOT", "."))
        return [
            self.env.get("SIM_PY", sys.executable), str(root / "scripts" / "eval_policy_client.py"),
            "--run-dir", str(self.run.root), "--scene", unit.scene, "--task", unit.task,
            "--seeds", *map(str, seeds), "--ready-file", str(self.server.client_ready_file),
            "--writer-id", self.worker_id, "--progress-file", str(self.progress),
            "--worker-pid", str(os.getpid()),
        ]  # fmt: skip


def main() -> int:
    worker_id = os.environ.get("WORKER_ID") or f"{socket.gethostname()}-{os.getpid()}"
    return Worker(run_dir_from_env(), worker_id).main()


if __name__ == "__main__":
    sys.exit(run_command("worker", main))
