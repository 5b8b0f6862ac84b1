"""The in-process debug launcher: the real worker, in this process, without a pool.

Like submitit's DebugExecutor: the same `Worker` that `slurm/eval_worker.sh` starts on a node (same
claims, resume, contract check and errored-episode accounting), run here with no node script, no
staging and no Slurm, so a breakpoint or a traceback lands in this terminal. The run is created from
the queue file first (or, if it exists, checked against this environment), so there is exactly one
episode path. At the end it prints each scene's per-task table and the totals, with intervals.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.config.manifest import Manifest, contract_hash
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.launch.newrun import new_run
from harness.launch.progress import planned_records
from harness.results.aggregate import summarize
from harness.results.tables import scene_text, total_text
from harness.worker.loop import Worker


def run_debug(
    settings: Settings, run: RunDir, queue_file: Path, worker_id: str = "debug"
) -> tuple[int, Manifest]:
    """Create or check the run, then run one worker over it here; (worker exit status, manifest)."""
    manifest = new_run(run.root, queue_file)
    os.environ.setdefault("WORKER_ID", worker_id)
    return Worker(run, worker_id, settings).main(), manifest


def results_text(run: RunDir, manifest: Manifest) -> str:
    """Per-task SR/HSR of each scene, then the totals, over the run's planned episodes."""
    found, _ = planned_records(run, manifest)
    records = [record for record in found.values() if record is not None]
    summary = summarize(records, contract_hash(manifest))
    header = f"run {run.name}: {len(records)}/{len(found)} planned episodes recorded\n"
    scenes = "\n".join(scene_text(scene, header) for scene in summary.scenes)
    return f"{scenes}\n{total_text(summary, header)}"
