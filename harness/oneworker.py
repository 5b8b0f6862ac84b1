"""One worker on one machine, without Slurm or the lease queue: the newcomer's end-to-end path.

Starts one model server (POLICY, loaded once), runs the sim client unit after unit over a queue
file's cells with each cell's first EVAL_TEST_NUM bank seeds (seeds already recorded are skipped,
so a rerun resumes), stops the server and prints a per-task SR/HSR table.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import knobs
from harness.modelproc import ModelServer
from harness.records import is_trial, read_tree
from harness.rundir import Cell, RunDir, read_queue, task_config_name
from harness.seedbank import bank_file, read_bank_file, resolve_root


def unit_seeds(cell: Cell, bench_config: str, count: int) -> list[int]:
    """The first `count` bank seeds (USE_EVAL_SEEDS=1) or 0..count-1."""
    if not knobs.get_bool("USE_EVAL_SEEDS"):
        return list(range(count))
    root = resolve_root(knobs.get("SEEDS_ROOT"), os.environ.get("BUNDLE", "."))
    return read_bank_file(bank_file(root, cell, bench_config))[:count]


def run_queue(run: RunDir, queue: Path, report: Callable[[str], None] = print) -> int:
    """Run every unit of `queue` into `run`; the number of units whose sim client failed."""
    cells = read_queue(queue)
    run.logs.mkdir(parents=True, exist_ok=True)
    if not run.queue.exists():
        shutil.copyfile(queue, run.queue)
    bench_config, count = knobs.get("BENCH_CONFIG"), knobs.get_int("EVAL_TEST_NUM")
    plans = {cell: unit_seeds(cell, bench_config, count) for cell in cells}  # bad banks fail before any start
    env = dict(os.environ)
    root = Path(env.get("EVAL_ROOT", Path(__file__).resolve().parent.parent))
    server = ModelServer(run.logs / "model_server.ready", run.logs / "model_server.log", env)
    failed = 0
    try:
        report(f"model server: {knobs.get('POLICY')} (log {server.log})")
        server.ensure(timeout_s=600)
        for cell, seeds in plans.items():
            done = read_tree(run.results).seeds(cell.task, task_config_name(cell.scene, bench_config))
            todo = [s for s in seeds if s not in done] if knobs.get_bool("EVAL_RESUME_SEEDS") else seeds
            if not todo:
                report(f"{cell.scene} {cell.task}: all {len(seeds)} seeds recorded")
                continue
            server.ensure(timeout_s=600)
            argv = [
                env.get("SIM_PY", sys.executable), str(root / "scripts" / "eval_policy_client.py"),
                "--run-dir", str(run.root), "--scene", cell.scene, "--task", cell.task,
                "--seeds", *map(str, todo), "--ready-file", str(server.ready_file),
                "--writer-id", "oneworker",
            ]  # fmt: skip
            began = time.monotonic()
            code = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL).returncode
            report(
                f"{cell.scene} {cell.task}: {len(todo)} seeds, exit {code}, {time.monotonic() - began:.0f} s"
            )
            failed += code != 0
    finally:
        server.stop()
    return failed


def results_table(run: RunDir) -> str:
    """Per (task, task_config) SR and HSR over trials (errored episodes counted apart)."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in read_tree(run.results).records.values():
        cells.setdefault((record["task"], record["task_config"]), []).append(record)
    lines = [f"{'task':<16} {'task_config':<16} {'trials':>6} {'SR':>7} {'HSR':>7} {'errors':>6}"]
    totals = [0, 0, 0, 0]
    for (task, config), records in sorted(cells.items()):
        trials = [r for r in records if is_trial(r)]
        sr, hsr = sum(r["success"] for r in trials), sum(r["hard_success"] for r in trials)
        errors = len(records) - len(trials)
        rates = f"{_pct(sr, trials):>7} {_pct(hsr, trials):>7}"
        lines.append(f"{task:<16} {config:<16} {len(trials):>6} {rates} {errors:>6}")
        for i, value in enumerate((len(trials), sr, hsr, errors)):
            totals[i] += value
    n, sr, hsr, errors = totals
    lines.append(
        f"{'TOTAL':<16} {'':<16} {n:>6} {_pct(sr, range(n)):>7} {_pct(hsr, range(n)):>7} {errors:>6}"
    )
    return "\n".join(lines)


def _pct(hits: int, trials: Any) -> str:
    return f"{100 * hits / len(trials):.1f}%" if len(trials) else "-"
