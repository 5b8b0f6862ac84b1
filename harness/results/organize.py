"""organize_results: a run dir → per-model video tree, results.txt per scene and in total, CSV, JSON,
and report.html. Reads the run only; writes only under the output dir. An adaptive run (EVAL_STOP)
shows each cell's state and counts each decided cell's decided prefix (`harness.results.adaptive`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.config.paths import run_dir
from harness.episode.records import record_key
from harness.pathnames import path_part
from harness.results import ResultsError
from harness.results.adaptive import load_adaptive
from harness.results.aggregate import Summary, summarize
from harness.results.chart import write_chart
from harness.results.load import LoadedRun, episode_key, load_run, resolve_run, split_by_contract
from harness.results.report import render
from harness.results.tables import scene_text, to_csv, to_json, total_text
from harness.results.videos import build_tree

CHART_NAME = "report_chart.png"

Log = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    run: str
    model: str
    out: Path | None = None  # default: $RUNS_ROOT/<model>
    videos: str = "link"
    split_by_contract: bool = False
    runs_root: str | None = None


def default_out(model: str, runs_root: str | None = None) -> Path:
    """$RUNS_ROOT/<model>, as in the reference."""
    return run_dir(model, {"RUNS_ROOT": runs_root} if runs_root else os.environ)


def _check_out(out: Path, loaded: LoadedRun) -> None:
    """Never write results into a run dir (a model name equal to the run name would do just that)."""
    resolved = out.resolve()
    if resolved == loaded.run.root or (resolved / "eval_result").exists() or (resolved / "run.yaml").exists():
        raise ResultsError(f"output dir {out} is a run dir; choose another model name or --out")


def organize(options: Options, log: Log) -> list[Path]:
    """Write every output; returns the output dir(s) (one per contract with split_by_contract)."""
    run = resolve_run(options.run, options.runs_root)
    log(f"reading records of {run.root}")
    loaded = load_run(run)
    for warning in loaded.warnings():
        log(f"warning: {warning}")
    groups = split_by_contract(loaded.records, options.split_by_contract)
    out = options.out or default_out(options.model, options.runs_root)
    _check_out(out, loaded)
    try:
        adaptive = load_adaptive(run, {record_key(r): r for r in loaded.records})
    except ValueError as exc:  # a bad manifest, queue file or seed bank: each names itself
        raise ResultsError(f"cannot read the stopping rule's plan of {run.root}: {exc}") from None
    if adaptive is not None:
        log(adaptive.summary_line())
    written = []
    for contract, records in sorted(groups.items()):
        target = out / f"contract-{contract[:12]}" if len(groups) > 1 else out
        log(f"contract {contract}: {len(records)} episode(s) → {target}")
        _write(loaded, records, summarize(records, contract, adaptive), options, target, log)
        written.append(target)
    return written


def _write(
    loaded: LoadedRun, records: list[dict[str, Any]], summary: Summary, options: Options, out: Path, log: Log
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    step = max(1, len(records) // 10)

    def progress(done: int, total: int) -> None:
        if done % step == 0 or done == total:
            log(f"videos ({options.videos}): {done}/{total} episodes")

    videos = build_tree(loaded.run, records, out, options.videos, progress)
    missing = sum(1 for r in records if r.get("video") and episode_key(r) not in videos)  # none when off
    lacking = [f"{missing} episode(s) lack the video file their record names"] if missing else []
    warnings = loaded.warnings() + lacking
    if missing:
        log(f"warning: {warnings[-1]}")
    meta = {
        "model": options.model,
        "run": str(loaded.run.root),
        "episodes": len(records),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "policies": sorted({str(r.get("policy")) for r in records}),
        "ckpts": sorted({str(r.get("ckpt")) for r in records}),
        "warnings": warnings,
    }
    header = f"model: {options.model}\nrun: {loaded.run.root}\ncontract: {summary.contract}\n"
    for scene in summary.scenes:
        (out / path_part(scene.name)).mkdir(parents=True, exist_ok=True)
        (out / path_part(scene.name) / "results.txt").write_text(scene_text(scene, header))
    (out / "results.txt").write_text(total_text(summary, header))
    (out / "results.csv").write_text(to_csv(summary))
    (out / "results.json").write_text(to_json(summary, meta))
    write_chart(summary, out / CHART_NAME)
    (out / "report.html").write_text(render(summary, meta, warnings, CHART_NAME, videos, out))
    log(f"wrote {out / 'results.txt'}, results.csv, results.json, report.html")
