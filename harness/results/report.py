"""report.html: a static page (no server) to look at a run: tables, the chart, and every episode.

Per task, a strip of episode tiles links each to its video, failures first, because the failures are
what someone opening the report wants to watch.
"""

from __future__ import annotations

import html
import os
import urllib.parse
from pathlib import Path
from typing import Any

from harness.episode.records import is_trial
from harness.results.aggregate import Group, Summary, TaskResult
from harness.results.load import EpisodeKey, episode_key
from harness.results.stats import Rate
from harness.results.tables import mean_note, mean_text

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;margin-top:28px} h3{font-size:15px;margin:16px 0 6px}
.meta{color:#555} .warn{background:#fff4d6;border:1px solid #e0c060;padding:8px 12px;margin:12px 0}
table{border-collapse:collapse;margin:8px 0} th,td{border:1px solid #ccc;padding:4px 10px;text-align:right}
th{background:#f0f2f5} td:first-child,th:first-child{text-align:left}
tr.total td{font-weight:600;background:#f7f7f7}
.ci{color:#666;font-size:12px} .strip{display:flex;flex-wrap:wrap;gap:4px;margin-bottom:8px}
.ep{display:inline-block;min-width:44px;padding:3px 6px;border-radius:4px;color:#fff;text-align:center;
font-size:12px;text-decoration:none} .fail{background:#c62828} .soft{background:#ef8f00}
.hard{background:#2e7d32} .err{background:#757575} span.ep{opacity:.75}
.legend .ep{margin-right:6px}
"""

OUTCOME_ORDER = {"fail": 0, "err": 1, "soft": 2, "hard": 3}
OUTCOME_TEXT = {
    "fail": "failed",
    "err": "errored (not a trial)",
    "soft": "success with collision",
    "hard": "hard success",
}


def outcome(record: dict[str, Any]) -> str:
    if not is_trial(record):
        return "err"
    if not record.get("success"):
        return "fail"
    return "hard" if record.get("hard_success") else "soft"


def _rate(rate: Rate) -> str:
    if not rate.n:
        return "— <span class=ci>0/0</span>"
    lo, hi = rate.interval  # type: ignore[misc]
    return f"{100 * rate.value:.1f}% <span class=ci>[{100 * lo:.1f}–{100 * hi:.1f}] {rate.k}/{rate.n}</span>"  # type: ignore[operator]


def _rate_cell(rate: Rate) -> str:
    return f"<td>{_rate(rate)}</td>"


def _mean(value: float | None, interval: tuple[float, float] | None) -> str:
    """A mean over tasks, its interval small and grey as a rate's is."""
    text = mean_text(value, interval)
    if interval is None:
        return text
    mean, bracket = text.split(" ", 1)
    return f"{mean} <span class=ci>{bracket}</span>"


def _scene_table(scenes: list[Group], total: Group) -> str:
    head = (
        "<tr><th>scene</th><th>tasks</th><th>SR (pooled)</th><th>HSR (pooled)</th>"
        "<th>SR mean/task</th><th>HSR mean/task</th><th>errored</th></tr>"
    )
    body = "".join(
        f"<tr><td>{html.escape(g.name)}</td><td>{len(g.tasks)}</td>{_rate_cell(g.pooled_sr)}"
        f"{_rate_cell(g.pooled_hsr)}<td>{_mean(g.mean_sr, g.mean_sr_interval)}</td>"
        f"<td>{_mean(g.mean_hsr, g.mean_hsr_interval)}</td><td>{g.errored}</td></tr>"
        for g in [*scenes, total]
    ).replace("<tr><td>TOTAL", "<tr class=total><td>TOTAL")
    return f"<table id=scenes>{head}{body}</table>"


def _state_cell(task: TaskResult) -> str:
    v = task.verdict
    if v is None:
        return ""
    after = f" <span class=ci>+{v.after} ran after the decision</span>" if v.after else ""
    return f"<td class=state>{html.escape(v.text)}{after}</td>"


def _task_table(scene: Group) -> str:
    state = "<th>state</th>" if any(t.verdict for t in scene.tasks) else ""
    head = f"<tr><th>task</th><th>SR</th><th>HSR</th><th>errored</th>{state}</tr>"
    body = "".join(
        f"<tr><td>{html.escape(t.task)}</td>{_rate_cell(t.sr)}{_rate_cell(t.hsr)}<td>{t.errored}</td>"
        f"{_state_cell(t)}</tr>"
        for t in scene.tasks
    )
    return f"<table class=tasks>{head}{body}</table>"


def _strip(task: TaskResult, videos: dict[EpisodeKey, Path], report_dir: Path) -> str:
    tiles = []
    for record in sorted(task.episodes, key=lambda r: (OUTCOME_ORDER[outcome(r)], int(r["seed"]))):
        kind = outcome(record)
        title = OUTCOME_TEXT[kind] + (f": {record['error']}" if kind == "err" else "")
        label = f"seed {int(record['seed'])}"
        video = videos.get(episode_key(record))
        attrs = f'class="ep {kind}" title="{html.escape(title)}"'
        if video is None:
            tiles.append(f"<span {attrs}>{label}</span>")
        else:
            # a URL, not a path: a '%' of a percent-encoded task dir must reach the browser as %25
            href = html.escape(urllib.parse.quote(os.path.relpath(video, report_dir)))
            tiles.append(f'<a {attrs} href="{href}">{label}</a>')
    return f"<div class=strip>{''.join(tiles)}</div>"


def _adaptive_note(summary: Summary) -> str:
    """An adaptive run's cell states and episodes saved (empty for a fixed run)."""
    if summary.adaptive is None:
        return ""
    line = html.escape(summary.adaptive.summary_line())
    return f"<p id=adaptive>{line}. A decided cell counts its seeds in bank order up to its decision.</p>"


def render(
    summary: Summary,
    meta: dict[str, Any],
    warnings: list[str],
    chart: str,
    videos: dict[EpisodeKey, Path],
    report_dir: Path,
) -> str:
    """The whole page; `chart` is the chart PNG's path relative to the page."""
    total = summary.total
    legend = "".join(f'<span class="ep {k}">{v}</span>' for k, v in OUTCOME_TEXT.items())
    parts = [
        f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(meta['model'])} results</title>"
        f"<style>{CSS}</style></head><body>",
        f"<h1>{html.escape(meta['model'])}</h1>",
        f"<div class=meta>run {html.escape(meta['run'])} · contract {html.escape(summary.contract)} · "
        f"{meta['episodes']} episodes · generated {html.escape(meta['generated_at'])}</div>",
        *(f"<div class=warn>{html.escape(w)}</div>" for w in warnings),
        "<p>SR = success rate; HSR = hard success (success and no collision). Each rate: percent "
        f"[{summary.interval} interval] successes/trials. Errored episodes are counted apart and are not "
        "trials.</p>",
        _adaptive_note(summary),
        f"<p><b>Total, mean over tasks</b> (each of {total.tasks_with_trials} tasks weighted equally): "
        f"SR {_mean(total.mean_sr, total.mean_sr_interval)}, "
        f"HSR {_mean(total.mean_hsr, total.mean_hsr_interval)} "
        f"<span class=ci>({html.escape(mean_note(summary.adaptive is not None))})</span>."
        "<br><b>Total, pooled over episodes</b>: "
        f"SR {_rate(total.pooled_sr)}, HSR {_rate(total.pooled_hsr)}; errored: {total.errored}.</p>",
        "<h2>Scenes</h2>",
        _scene_table(summary.scenes, total),
        f'<h2>SR and HSR per task</h2><img id=chart alt="SR and HSR per task" src="{html.escape(chart)}">',
    ]
    for scene in summary.scenes:
        parts += [f"<h2>Scene {html.escape(scene.name)}</h2>", _task_table(scene)]
        parts.append(f"<div class=legend>{legend}</div>")
        for task in scene.tasks:
            parts += [
                f"<h3>{html.escape(task.task)} "
                f"<span class=ci>({html.escape(task.task_config)}, failures first)</span></h3>",
                _strip(task, videos, report_dir),
            ]
    parts.append("</body></html>\n")
    return "\n".join(parts)
