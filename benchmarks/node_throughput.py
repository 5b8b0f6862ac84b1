"""A whole run as a user feels it: the shipped clean bank through the local pool on this machine.

Creates a run of `seeds/maniskill_queue.txt` (7 tasks) at EVAL_TEST_NUM (default 10: 70 episodes)
with the replay policy, starts `scripts/run_local.sh 1` (one node; its workers and sim slots as the
node sizes itself, or as CPU_WORKERS / SIMS_PER_WORKER / UNIT_SEEDS in the environment say), prints
the node's sizing line and the run's unit split, and from the records, the worker logs and the sim
processes' CPU time reports:
- episodes/hour over the pool's wall time, and the time from the pool's start to the first record;
- the amortized overhead: 1 - (sum of steady-state env-step time + sum of policy time) / sum of
  slot wall time. Steady-state env-step time of an episode = its steps x its task's median sim
  seconds per step (so one-time start-ups are overhead); slot wall time = pool wall x slots;
- the node's physical limit: cores / sim CPU-seconds per episode (user + system time of every sim
  process and the encoders it waited for, sampled from /proc during the run) in episodes/hour.

Last line: `episodes_per_hour=<n> first_episode_s=<n> amortized_overhead_pct=<n> limit_ratio=<r>`.

Example (about 5 minutes on 2 quiet cores; no knob set: the defaults are what it measures):
  $SIM_PY benchmarks/node_throughput.py
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config.manifest import load_manifest  # noqa: E402
from harness.config.rundir import RunDir  # noqa: E402
from harness.episode.records import read_tree  # noqa: E402

STARTED = re.compile(r"sim process pid (\d+) started")
AUTO = re.compile(r"SIMS_PER_WORKER=auto: (\d+)")
PLANNED = re.compile(r"\] worker (\S+) CUDA_VISIBLE_DEVICES='[^']*' SIMS_PER_WORKER=(\S+)")
SIZING = re.compile(r"\] (sizing: .*)")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime + cutime + cstime of a live process (its waited-for children included)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return sum(int(f) for f in fields[11:15]) / TICK


def sim_pids(logs: Path) -> set[int]:
    return {int(m.group(1)) for log in logs.glob("worker-*.log") for m in STARTED.finditer(log.read_text())}


def run_pool(env: dict[str, str], run: RunDir) -> tuple[float, float, dict[int, float]]:
    """Start the pool, sample sim CPU times until it ends; (start epoch, wall s, cpu s per sim pid)."""
    cpu: dict[int, float] = {}
    started = time.time()
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "run_local.sh"), "1"], env=env, cwd=ROOT)
    while proc.poll() is None:
        time.sleep(0.5)
        if run.logs.exists():
            for pid in sim_pids(run.logs):
                if (seconds := cpu_seconds(pid)) is not None:
                    cpu[pid] = seconds
    wall = time.time() - started
    if proc.returncode != 0:
        raise SystemExit(f"node_throughput: the pool exited with {proc.returncode}; logs in {run.logs}")
    return started, wall, cpu


def slot_counts(logs: Path) -> dict[str, int]:
    """Sim slots per worker: what the node script gave it, or what its `auto` chose (a worker that
    never chose ran its one slot)."""
    node_logs = "".join(log.read_text() for log in logs.glob("node-*.log"))
    counts = {}
    for worker, sims in PLANNED.findall(node_logs):
        log = logs / f"worker-{worker}.log"
        chosen = AUTO.findall(log.read_text()) if log.exists() else []
        counts[worker] = int(sims) if sims.isdigit() else int(chosen[-1]) if chosen else 1
    return counts


def steady_sim_s(records: list[dict]) -> float:
    """Sum over episodes of steps x the task's median sim seconds per step."""
    per_step: dict[str, list[float]] = defaultdict(list)
    for r in records:
        per_step[r["task"]].append(r["sim_s"] / r["steps"])
    median = {task: statistics.median(values) for task, values in per_step.items()}
    return sum(r["steps"] * median[r["task"]] for r in records)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--test-num", type=int, default=10, help="seeds per task (10: 70 episodes)")
    p.add_argument("--keep", type=Path, help="RUNS_ROOT to create the run in (default: a temp dir)")
    args = p.parse_args()
    runs_root = args.keep or Path(tempfile.mkdtemp(prefix="node-throughput-"))
    env = dict(os.environ, RUNS_ROOT=str(runs_root), STUDY_RUN="throughput", POLICY="replay",
               EVAL_TEST_NUM=str(args.test_num), BENCH_CONFIG="clean", BUNDLE=str(ROOT),
               PYTHONPATH=str(ROOT), EVAL_ROOT=str(ROOT))  # fmt: skip
    env.pop("RUN_DIR", None)
    sim_py = env.get("SIM_PY", sys.executable)
    queue = ROOT / "seeds" / "maniskill_queue.txt"
    made = subprocess.run([sim_py, str(ROOT / "scripts" / "new_run.py"), "throughput", "--queue", str(queue)],
                          env=env, capture_output=True, text=True)  # fmt: skip
    if made.returncode != 0:
        raise SystemExit(f"node_throughput: cannot create the run: {made.stderr[-2000:]}")
    run = RunDir(runs_root / "throughput")
    print(f"unit split: {load_manifest(run.root).info.get('unit_split', '-')}", flush=True)
    started, wall, cpu = run_pool(env, run)
    sizing = SIZING.findall("".join(log.read_text() for log in run.logs.glob("node-*.log")))
    print(f"node {sizing[0] if sizing else 'sizing: not logged'}")
    records = [r for r in read_tree(run.results).records.values() if r["error"] is None and r["steps"]]
    if not records:
        raise SystemExit(f"node_throughput: no trial was recorded; logs in {run.logs}")
    first = min(datetime.fromisoformat(r["finished_at"]).timestamp() for r in records) - started
    counts = slot_counts(run.logs)
    workers, slots = len(counts), sum(counts.values())
    steady, policy = steady_sim_s(records), sum(r["model_s"] for r in records)
    overhead = 1 - (steady + policy) / (wall * slots)
    per_hour = len(records) / wall * 3600
    cores = len(os.sched_getaffinity(0))
    cpu_per_episode = sum(cpu.values()) / len(records)
    limit = cores / cpu_per_episode * 3600
    print(f"{len(records)} episodes by {workers} workers, {slots} slots in all, in {wall:.0f} s; "
          f"{len(cpu)} sim processes; sim CPU {sum(cpu.values()):.0f} s ({cpu_per_episode:.1f} s/episode); "
          f"steady env-step {steady:.0f} s, policy {policy:.0f} s; limit {limit:.0f} episodes/hour "
          f"on {cores} cores; load average at the end {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(
        f"episodes_per_hour={per_hour:.0f} first_episode_s={first:.1f} "
        f"amortized_overhead_pct={overhead * 100:.1f} limit_ratio={per_hour / limit:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
