"""Issue 24: a node left at the defaults fills its allocation (harness.node.sizing), an explicit knob
wins, the node script's plan says what it chose in one line, and `auto` slots stay within the
worker's share of the node."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.settings import Settings
from harness.node.sizing import NodeResources, detect, size_node
from harness.worker import slot_count

ROOT = Path(__file__).resolve().parents[2]


def _env(**knobs: str) -> Settings:
    return Settings.from_env(knobs)  # a knob left out is at its default


def test_cpu_node_defaults_fill_the_cores_with_one_sim_per_worker() -> None:
    plan = size_node(NodeResources(64, "affinity", [], 256.0, "MemTotal"), _env())
    assert (len(plan.devices), plan.sims_per_worker, plan.worker_cores) == (64, "1", 1)
    assert plan.devices == [""] * 64
    assert "sizing: 64 workers x 1 sim slot(s) each" in plan.why and "64 cores (affinity)" in plan.why


def test_memory_bounds_the_sims_and_sims_per_worker_sets_the_worker_size() -> None:
    tight = size_node(NodeResources(64, "affinity", [], 16.0, "cgroup memory.max"), _env())
    assert len(tight.devices) == 8 and "budget 8 sims" in tight.why and "cgroup memory.max" in tight.why
    four = size_node(NodeResources(64, "affinity", [], 256.0, "MemTotal"), _env(SIMS_PER_WORKER="4"))
    assert (len(four.devices), four.sims_per_worker) == (16, "4")


def test_gpu_node_runs_workers_per_gpu_with_auto_slots_bounded_by_their_core_share() -> None:
    plan = size_node(NodeResources(64, "SLURM_CPUS_ON_NODE", ["0", "1", "2", "3"], 512.0, "MemTotal"), _env())
    assert plan.devices == ["0", "1", "2", "3"] and plan.sims_per_worker == "auto" and plan.worker_cores == 16
    two = size_node(NodeResources(64, "affinity", ["0", "1"], 512.0, "MemTotal"), _env(WORKERS_PER_GPU="2"))
    assert two.devices == ["0", "0", "1", "1"] and two.worker_cores == 16


def test_an_explicit_knob_wins_even_over_the_budget_and_the_line_says_so() -> None:
    res = NodeResources(2, "affinity", [], 64.0, "MemTotal")
    plan = size_node(res, _env(CPU_WORKERS="3", SIMS_PER_WORKER="2"))
    assert (len(plan.devices), plan.sims_per_worker) == (3, "2")
    assert "explicit knobs exceed the budget of 2 sims" in plan.why
    auto = size_node(res, _env(CPU_WORKERS="1"))  # auto slots, up to the whole budget
    assert (len(auto.devices), auto.sims_per_worker, auto.worker_cores) == (1, "auto", 2)


@pytest.mark.parametrize(
    ("name", "value"), [("CPU_WORKERS", "0"), ("CPU_WORKERS", "many"), ("SIMS_PER_WORKER", "-1")]
)
def test_a_bad_count_is_a_clear_error_naming_the_knob(name: str, value: str) -> None:
    """Refused where the node script builds its settings, before anything is sized."""
    with pytest.raises(ValueError, match=f"knob {name}={value!r}: expected an integer (>= 1|1..64) or auto"):
        _env(**{name: value})


def test_detect_reads_slurm_the_cgroup_and_a_local_pool_share(tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "cpu.max").write_text("150000 100000\n")  # 1.5 cores of quota: 2
    (cgroup / "memory.max").write_text(str(12 * 2**30) + "\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       65536000 kB\n")
    env = {"CUDA_VISIBLE_DEVICES": "", "SLURM_JOB_ID": "1"}
    affinity = len(os.sched_getaffinity(0))
    got = detect(env, cgroup, meminfo)
    assert got.cores == min(2, affinity) and got.mem_gib == 12.0 and got.mem_from == "cgroup memory.max"
    assert detect({**env, "SLURM_CPUS_ON_NODE": "1"}, cgroup, meminfo).cores_from == "SLURM_CPUS_ON_NODE"
    (cgroup / "cpu.max").write_text("max 100000\n")
    (cgroup / "memory.max").write_text("max\n")
    shared = detect({**env, "LOCAL_POOL_NODES": "2"}, cgroup, meminfo)
    assert shared.cores == max(1, affinity // 2) and shared.mem_gib == pytest.approx(62.5 / 2)
    assert "/ 2 local nodes" in shared.cores_from and shared.gpus == []
    assert detect({"CUDA_VISIBLE_DEVICES": "2,3"}, cgroup, meminfo).gpus == ["2", "3"]


def test_the_node_plan_with_no_knob_set_fills_the_allocation_and_says_why() -> None:
    """The node script's `plan` step: with SLURM_CPUS_ON_NODE=2 and no knob, two one-slot workers
    (one sim per core), each told its core share; before issue 24 it planned one worker."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("CPU_WORKERS", "SIMS_PER_WORKER", "WORKERS_PER_GPU")
    }
    env.update(
        NODE_NAME="nA",
        SLURM_JOB_ID="7",
        SLURM_CPUS_ON_NODE="2",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=str(ROOT),
    )
    env.pop("LOCAL_POOL_NODES", None)
    done = subprocess.run(
        [sys.executable, "-m", "harness.node.steps", "plan"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    cores = min(2, len(os.sched_getaffinity(0)))
    rows = [line.split() for line in done.stdout.splitlines()]
    assert rows == [[f"nA-j7-w{i}", "-", "1", "1"] for i in range(cores)]
    [line] = [x for x in done.stderr.splitlines() if "sizing:" in x]
    assert line.startswith(f"[node nA] sizing: {cores} workers x 1 sim slot(s) each; CPU_WORKERS=auto")


def test_auto_slots_stay_within_the_workers_core_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's workers start together, so the load average does not yet show the others: without
    the share, each of 4 workers on a 16-core node would take all 16 cores' worth of slots."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(slot_count, "gpu_free_gib", lambda: None)
    monkeypatch.setenv("EVAL_WORKER_CORES", "4")
    records = [{"error": None, "steps": 100, "sim_s": 1.0, "model_s": 0.01}]
    count, why = slot_count.choose(slot_count.measure(records))
    assert count == 4 and "4.0 free cores" in why
