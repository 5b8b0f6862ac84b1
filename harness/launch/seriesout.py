"""The watched series' outputs: each finished run organized (its tables and report, as
organize_results writes them) and the learning curve as CSV, JSON, a PNG and an HTML page linking
every checkpoint's report.

The CSV has one row per (checkpoint, task) and one `TOTAL` row per checkpoint (pooled over
episodes), each rate with its interval and label; the TOTAL rows carry the paired verdict against
the best earlier checkpoint. The JSON holds the same, nested by checkpoint.
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from harness.config.rundir import RunDir
from harness.launch import series
from harness.launch.curve import Point, curve
from harness.results import ResultsError
from harness.results.organize import Options, organize

FIELDS = [
    "step", "run", "state", "level", "task", "sr", "sr_lo", "sr_hi", "sr_k", "sr_n", "hsr", "hsr_lo",
    "hsr_hi", "hsr_k", "hsr_n", "interval", "errored", "verdict", "against_step", "diff_sr", "diff_lo",
    "diff_hi", "mcnemar_p", "p_holm",
]  # fmt: skip


def _rows(point: Point) -> list[dict[str, Any]]:
    rows = []
    errored = {f"{t.scene}/{t.task}": t.errored for t in point.summary.total.tasks}
    for name, sr, hsr in point.rates():
        total = name == "TOTAL"
        row: dict[str, Any] = {"step": point.step, "run": point.run, "state": point.state}
        row.update(level="total" if total else "task", task=name, interval=sr.label)
        for key, rate in (("sr", sr), ("hsr", hsr)):
            d = rate.as_dict()
            row.update(
                {
                    key: d["rate"],
                    f"{key}_lo": d["lo"],
                    f"{key}_hi": d["hi"],
                    f"{key}_k": d["k"],
                    f"{key}_n": d["n"],
                }
            )
        row["errored"] = point.summary.total.errored if total else errored[name]
        if total and point.verdict is not None:
            v = point.verdict.as_dict()
            row.update(verdict=v["verdict"], against_step=v["against_step"], diff_sr=v["diff_sr"])
            row.update(diff_lo=v["diff_lo"], diff_hi=v["diff_hi"], mcnemar_p=v["mcnemar_p"])
        elif point.verdict is not None and (call := point.verdict.tasks.get(name)) is not None:
            row.update(verdict=call.word, against_step=point.verdict.best_step, diff_sr=call.diff)
            row.update(diff_lo=call.lo, diff_hi=call.hi, mcnemar_p=call.p_value, p_holm=call.p_holm)
        rows.append(row)
    return rows


def to_csv(points: list[Point]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, FIELDS, lineterminator="\n")
    writer.writeheader()
    for point in points:
        writer.writerows(_rows(point))
    return buf.getvalue()


def point_dict(point: Point) -> dict[str, Any]:
    """One checkpoint as JSON (and as the dashboards log it)."""
    return {
        "step": point.step,
        "run": point.run,
        "checkpoint": point.checkpoint,
        "state": point.state,
        "interval": point.summary.interval,
        "tasks": {name: {"sr": sr.as_dict(), "hsr": hsr.as_dict()} for name, sr, hsr in point.rates()[:-1]},
        "total": {
            "sr": point.summary.total.pooled_sr.as_dict(),
            "hsr": point.summary.total.pooled_hsr.as_dict(),
            "mean_sr_over_tasks": point.summary.total.mean_sr,
            "errored": point.summary.total.errored,
        },
        "verdict": point.verdict.as_dict() if point.verdict else None,
        "task_verdicts": {n: vars(c) for n, c in point.verdict.tasks.items()} if point.verdict else None,
    }


def write_plot(points: list[Point], path: Path) -> None:
    """SR against the step: the pooled total with its interval as a band, each task as a thin line."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    steps = [p.step for p in points]
    names = [name for name, _, _ in points[-1].rates()[:-1]] if points else []
    for name in names:
        pairs = [(p.step, dict((n, s) for n, s, _ in p.rates()).get(name)) for p in points]
        xs = [s for s, r in pairs if r is not None and r.n]
        ax.plot(xs, [100 * r.value for _, r in pairs if r is not None and r.n], lw=0.8, alpha=0.6, label=name)
    totals = [p.summary.total.pooled_sr for p in points]
    ok = [(s, r) for s, r in zip(steps, totals, strict=True) if r.n]
    if ok:
        xs = [s for s, _ in ok]
        ax.fill_between(xs, [100 * r.interval[0] for _, r in ok], [100 * r.interval[1] for _, r in ok],
                        color="#3b7dd8", alpha=0.2, label=f"TOTAL {ok[0][1].label}")  # fmt: skip
        ax.plot(xs, [100 * r.value for _, r in ok], "o-", color="#3b7dd8", lw=2, label="TOTAL (pooled)")
    for p in points:
        if p.verdict is not None and p.verdict.word != "no clear difference" and p.summary.total.pooled_sr.n:
            mark = "^" if p.verdict.word == "better" else "v"
            ax.plot([p.step], [100 * p.summary.total.pooled_sr.value], mark, color="#222", ms=9)
    ax.set_ylim(-2, 102)
    ax.set_xlabel("training step")
    ax.set_ylabel("SR (%)")
    ax.set_title("learning curve (▲/▼: paired ΔSR vs best so far excludes 0)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _pct(value: float | None, signed: bool = False) -> str:
    return "—" if value is None else f"{100 * value:{'+' if signed else ''}.1f}%"


def to_html(points: list[Point], prefix: str) -> str:
    rows = []
    for p in points:
        v = p.verdict
        cells = [
            str(p.step), f'<a href="{html.escape(p.run)}/report.html">{html.escape(p.run)}</a>', p.state,
            p.summary.total.pooled_sr.text(), p.summary.total.pooled_hsr.text(),
            "—" if v is None else f"{v.word} vs step {v.best_step}: ΔSR {_pct(v.diff, True)} "
            f"[{_pct(v.lo, True)}, {_pct(v.hi, True)}], McNemar p={v.p_value:.3g}, {v.pairs} pairs",
        ]  # fmt: skip
        rows.append(
            "<tr>" + "".join(f"<td>{c if '<a' in c else html.escape(c)}</td>" for c in cells) + "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>" for h in ("step", "run", "state", "SR (pooled)", "HSR (pooled)", "paired verdict")
    )
    label = points[0].summary.interval if points else "Wilson 95%"
    return f"""<!doctype html><meta charset="utf-8"><title>learning curve: {html.escape(prefix)}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 10px;text-align:left}}</style>
<h1>Learning curve: {html.escape(prefix)}</h1>
<p>Rates carry their {html.escape(label)} interval. Each checkpoint is paired with the best earlier one
(highest pooled SR) on the seeds both ran: Newcombe's paired 95% interval of ΔSR and the exact McNemar
p-value, as <code>compare_runs</code> gives them. Per-task rates: <a href="curve.csv">curve.csv</a>,
<a href="curve.json">curve.json</a>.</p>
<img src="curve.png" alt="SR against the training step">
<table><tr>{head}</tr>
{chr(10).join(rows)}
</table>
"""


def write_curve(prefix: str, out: Path) -> list[Point]:
    """curve.csv, curve.json, curve.png and curve.html of the series under `out`."""
    points = curve(series.series(prefix))
    out.mkdir(parents=True, exist_ok=True)
    (out / "curve.csv").write_text(to_csv(points))
    doc = {"series": prefix, "points": [point_dict(p) for p in points]}
    (out / "curve.json").write_text(json.dumps(doc, indent=1) + "\n")
    write_plot(points, out / "curve.png")
    (out / "curve.html").write_text(to_html(points, prefix))
    return points


def publish(prefix: str, out: Path, run: RunDir, say: Callable[[str], None]) -> dict[str, Any] | None:
    """Organize `run` into `out/<run>/`, rewrite the curve; the run's point as a dict (None if it
    has none). A results error is said, never raised: the eval itself is done."""
    try:
        organize(Options(str(run.root), run.name, out=out / run.name, videos="link"), lambda line: None)
        points = write_curve(prefix, out)
    except ResultsError as exc:
        say(f"warning: cannot write the results of {run.name}: {exc}")
        return None
    point = next((p for p in points if p.run == run.name), None)
    if point is None:
        return None
    v = point.verdict
    verdict = ""
    if v is not None:
        interval = f"[{_pct(v.lo, True)}, {_pct(v.hi, True)}]"
        verdict = f"; {v.word} vs step {v.best_step} (ΔSR {_pct(v.diff, True)} {interval}, p={v.p_value:.3g})"
    say(f"step {point.step}: SR {point.summary.total.pooled_sr.text()}{verdict}; curve: {out / 'curve.html'}")
    return point_dict(point) | {"videos": _videos(out / run.name)}


def _videos(tree: Path, most: int = 2) -> list[str]:
    """A few episode videos of the organized run (failures and successes alike), for the dashboards."""
    return [str(p) for p in sorted(tree.glob("*/*/seed*.mp4"))[:most]]
