"""What a run has left to do, and its results table, read from the records alone.

The records are the truth: lease marks can be cleared and workers killed, but an episode with a
record is done. A seed whose latest record is an errored episode is not done (the worker retries it
until CRASH_LIMIT quarantines its unit) and is counted apart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.config.manifest import Manifest, contract_hash
from harness.config.plan import planned_seeds
from harness.config.rundir import RunDir, task_config_name
from harness.episode.records import read_tree
from harness.results.aggregate import summarize
from harness.results.tables import columns


@dataclass(frozen=True)
class Progress:
    units: int
    units_done: int
    planned: int  # planned episodes (units x seeds)
    done: int  # planned episodes with a trial record
    errored: int  # planned episodes whose latest record errored

    @property
    def complete(self) -> bool:
        return self.done == self.planned

    def line(self) -> str:
        errored = f", {self.errored} errored" if self.errored else ""
        return f"{self.done}/{self.planned} episodes, {self.units_done}/{self.units} units{errored}"


def planned_records(
    run: RunDir, manifest: Manifest, env: Mapping[str, str] = os.environ
) -> tuple[dict[tuple[str, str, int], dict[str, Any] | None], int]:
    """Each planned (task, task_config, seed) with its latest record (or None), and the unit count."""
    records = read_tree(run.results).records
    plan = planned_seeds(run.root, manifest, env)
    bench_config = manifest.knobs["BENCH_CONFIG"]
    out: dict[tuple[str, str, int], dict[str, Any] | None] = {}
    for cell, seeds in plan.items():
        task_config = task_config_name(cell.scene, bench_config)
        out.update({(cell.task, task_config, s): records.get((cell.task, task_config, s)) for s in seeds})
    return out, len(plan)


def progress(run: RunDir, manifest: Manifest, env: Mapping[str, str] = os.environ) -> Progress:
    found, units = planned_records(run, manifest, env)
    missing_units = {
        (task, task_config)
        for (task, task_config, _), rec in found.items()
        if rec is None or rec.get("error")
    }
    return Progress(
        units=units,
        units_done=units - len(missing_units),
        planned=len(found),
        done=sum(1 for rec in found.values() if rec is not None and rec.get("error") is None),
        errored=sum(1 for rec in found.values() if rec is not None and rec.get("error") is not None),
    )


def results_table(rows: list[tuple[str, RunDir, Manifest]], label: str) -> str:
    """SR and HSR (pooled over episodes, Wilson 95% interval) of each run, one row each."""
    table = [[label, "run", "episodes", "SR [95% CI] k/n", "HSR [95% CI] k/n", "errored"]]
    for name, run, manifest in rows:
        found, _ = planned_records(run, manifest)
        records = [rec for rec in found.values() if rec is not None]
        total = summarize(records, contract_hash(manifest)).total
        table.append(
            [
                name,
                run.name,
                f"{len(records)}/{len(found)}",
                total.pooled_sr.text(),
                total.pooled_hsr.text(),
                str(total.errored),
            ]
        )
    return columns(table)
