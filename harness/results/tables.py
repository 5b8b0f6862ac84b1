"""The results as text tables (results.txt), CSV and JSON: the same numbers, for people and for tools.

Each table states what its rates mean and how totals were formed, so a number copied out of it keeps
its n, its interval (Wilson, or anytime-valid in an adaptive run) and whether it is a mean over tasks
(with its stratified score interval, `harness.results.stats.mean_interval`) or pooled over episodes. An
adaptive run's tables add each cell's state and the episodes saved.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from harness.results.aggregate import Group, Summary, TaskResult
from harness.results.stats import MEAN_INTERVAL, Rate

LEGEND = (
    "SR = success rate; HSR = hard success rate (success and no collision).\n"
    "Each rate: percent [{interval} interval] successes/trials. Errored episodes are not trials.\n"
)
ADAPTIVE_LEGEND = (
    "A decided cell counts the seeds (in the bank's order) up to its decision; episodes that ran after\n"
    "it are listed apart, not counted.\n"
)


def legend(adaptive: bool) -> str:
    """The legend of a run's tables: which interval its rates carry, and, adaptive, what is counted."""
    text = LEGEND.format(interval="anytime-valid 95%" if adaptive else "Wilson 95%")
    return text + ADAPTIVE_LEGEND if adaptive else text


def _state(task: TaskResult) -> str:
    v = task.verdict
    return "" if v is None else v.text + (f" (+{v.after} after)" if v.after else "")


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def mean_text(value: float | None, interval: tuple[float, float] | None) -> str:
    """A mean over tasks with its interval: `62.5% [49.2–73.4]`; the bare mean when it has none."""
    if value is None or interval is None:
        return _pct(value)
    return f"{_pct(value)} [{100 * interval[0]:.1f}–{100 * interval[1]:.1f}]"


def mean_note(adaptive: bool) -> str:
    """What the mean over tasks' brackets are."""
    return "no interval: an adaptive run" if adaptive else f"brackets: {MEAN_INTERVAL}"


def columns(rows: list[list[str]]) -> str:
    """Rows of cells as aligned text columns, the first row a header underlined with dashes."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def _totals(group: Group, label: str) -> str:
    adaptive = any(t.verdict is not None for t in group.tasks)
    return (
        f"{label} mean over tasks (each task weighted equally, {group.tasks_with_trials} task(s)): "
        f"SR {mean_text(group.mean_sr, group.mean_sr_interval)}  "
        f"HSR {mean_text(group.mean_hsr, group.mean_hsr_interval)}  ({mean_note(adaptive)})\n"
        f"{label} pooled over episodes (each episode weighted equally): "
        f"SR {group.pooled_sr.text()}  HSR {group.pooled_hsr.text()}\n"
        f"{label} errored episodes (not trials): {group.errored}\n"
    )


def scene_text(scene: Group, header: str) -> str:
    """results.txt of one scene: a row per task (with its state, adaptive), then the scene's two totals."""
    adaptive = any(t.verdict is not None for t in scene.tasks)
    rows = [["task", "SR", "HSR", "errored"] + (["state"] if adaptive else [])]
    rows += [
        [t.task, t.sr.text(), t.hsr.text(), str(t.errored)] + ([_state(t)] if adaptive else [])
        for t in scene.tasks
    ]
    return f"{header}scene: {scene.name}\n{legend(adaptive)}\n{columns(rows)}\n{_totals(scene, 'scene')}"


def total_text(summary: Summary, header: str) -> str:
    """The model's results.txt: a row per scene (pooled and mean over tasks), then TOTAL both ways."""
    rows = [["scene", "tasks", "SR (pooled)", "HSR (pooled)", "SR mean/task", "HSR mean/task", "errored"]]
    rows += [
        [
            g.name,
            str(len(g.tasks)),
            g.pooled_sr.text(),
            g.pooled_hsr.text(),
            mean_text(g.mean_sr, g.mean_sr_interval),
            mean_text(g.mean_hsr, g.mean_hsr_interval),
            str(g.errored),
        ]
        for g in summary.scenes
    ]
    adaptive = f"{summary.adaptive.summary_line()}\n" if summary.adaptive else ""
    totals = _totals(summary.total, "TOTAL")
    return f"{header}{legend(summary.adaptive is not None)}\n{columns(rows)}\n{totals}{adaptive}"


def _rate_fields(prefix: str, rate: Rate) -> dict[str, Any]:
    d = rate.as_dict()
    return {f"{prefix}": d["rate"], f"{prefix}_lo": d["lo"], f"{prefix}_hi": d["hi"], f"{prefix}_k": d["k"]}


def _task_row(t: TaskResult) -> dict[str, Any]:
    return {
        "level": "task",
        "scene": t.scene,
        "task": t.task,
        "task_config": t.task_config,
        "n": t.sr.n,
        **_rate_fields("sr", t.sr),
        **_rate_fields("hsr", t.hsr),
        "errored": t.errored,
        "sr_mean_over_tasks": None,
        "hsr_mean_over_tasks": None,
        **_verdict_fields(t),
    }


def _verdict_fields(t: TaskResult) -> dict[str, Any]:
    """An adaptive run's cell state columns (absent from a fixed run's rows)."""
    if t.verdict is None:
        return {}
    v = t.verdict.as_dict()
    return {"state": v["state"], "decision": v["decision"], "ran_after_decision": v["ran_after_decision"],
            "saved": v["saved"]}  # fmt: skip


def _group_row(level: str, g: Group, scene: str) -> dict[str, Any]:
    return {
        "level": level,
        "scene": scene,
        "task": "",
        "task_config": "",
        "n": g.pooled_sr.n,
        **_rate_fields("sr", g.pooled_sr),
        **_rate_fields("hsr", g.pooled_hsr),
        "errored": g.errored,
        "sr_mean_over_tasks": g.mean_sr,
        "hsr_mean_over_tasks": g.mean_hsr,
    }


def rows(summary: Summary) -> list[dict[str, Any]]:
    """Flat rows: every task, every scene, and the total. A scene or total row's `sr`/`hsr` is pooled over
    episodes; its mean over tasks is in its own columns, so neither is mistaken for the other."""
    out: list[dict[str, Any]] = []
    for scene in summary.scenes:
        out += [_task_row(t) for t in scene.tasks]
        out.append(_group_row("scene", scene, scene.name))
    out.append(_group_row("total", summary.total, ""))
    return out


def to_csv(summary: Summary) -> str:
    table = rows(summary)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(table[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    return buffer.getvalue()


def to_json(summary: Summary, meta: dict[str, Any]) -> str:
    """Rows plus the run's metadata and warnings; the two totals are named, not implied."""
    total = summary.total
    sr_lo, sr_hi = total.mean_sr_interval or (None, None)
    hsr_lo, hsr_hi = total.mean_hsr_interval or (None, None)
    doc = {
        **meta,
        "contract": summary.contract,
        "interval": summary.interval,
        "totals": {
            "mean_over_tasks": {
                "sr": total.mean_sr,
                "sr_lo": sr_lo,
                "sr_hi": sr_hi,
                "hsr": total.mean_hsr,
                "hsr_lo": hsr_lo,
                "hsr_hi": hsr_hi,
                "interval": None if sr_lo is None else MEAN_INTERVAL,
                "tasks": total.tasks_with_trials,
            },
            "pooled_over_episodes": {"sr": total.pooled_sr.as_dict(), "hsr": total.pooled_hsr.as_dict()},
            "errored": total.errored,
        },
        "rows": rows(summary),
    }
    if summary.adaptive is not None:
        a = summary.adaptive
        doc["adaptive"] = {"rule": a.rule, "cells": a.states(), "cap": a.cap, "ran": a.ran, "saved": a.saved,
                           "ran_after_decision": a.after}  # fmt: skip
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"
