"""A comparison as a text table (stdout) with the per-task verdicts, JSON, and an HTML page whose flipped
seeds link both videos."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

from harness.results.compare import Comparison, Flip, PairedCell
from harness.results.tables import columns
from harness.results.verdicts import CORRECTION, TaskVerdict

METRICS = (("SR", "success"), ("HSR", "hard_success"))
DIFF_INTERVAL = "Newcombe paired 95%"


def _pct(value: float | None, signed: bool = False) -> str:
    return "—" if value is None else f"{100 * value:{'+' if signed else ''}.1f}%"


def _interval(bounds: tuple[float, float] | None) -> str:
    return "—" if bounds is None else f"[{100 * bounds[0]:+.1f}, {100 * bounds[1]:+.1f}]"


def _outcome(record: dict[str, Any]) -> str:
    if not record.get("success"):
        return "failed"
    return "hard success" if record.get("hard_success") else "success with collision"


def _row(cell: PairedCell) -> list[str]:
    row = [cell.name, str(len(cell.pairs))]
    for _, metric in METRICS:
        a, b = cell.rate(0, metric), cell.rate(1, metric)
        test = cell.test(metric)
        row += [
            f"{a.k}/{a.n}",
            f"{b.k}/{b.n}",
            _pct(cell.diff(metric), signed=True),
            _interval(cell.diff_interval(metric)),
            f"{test.b}/{test.c}",
            f"{test.p_value:.3g}",
        ]
    return [*row, f"{cell.only_a}/{cell.only_b}/{cell.errored}"]


def _verdict_table(comp: Comparison) -> list[str]:
    """Per task and metric: the discordant pairs, p, Holm-adjusted p and the verdict."""
    head = ["task"]
    for name, _ in METRICS:
        head += [f"{name} A>B/B>A", f"{name} p", f"{name} p Holm", f"{name} verdict"]
    per_metric = [comp.verdicts(metric) for _, metric in METRICS]
    rows = [head]
    for i, cell in enumerate(comp.cells):
        row = [cell.name]
        for verdicts in per_metric:
            v = verdicts[i]
            row += [f"{v.test.b}/{v.test.c}", f"{v.test.p_value:.3g}", f"{v.p_holm:.3g}", v.verdict]
        rows.append(row)
    return [
        f"per-task verdicts at α = {comp.alpha:g}: exact McNemar per task, p Holm-adjusted over the "
        f"{len(comp.cells)} task(s) (the chance of any wrong 'better'/'worse' ≤ α)",
        columns(rows),
    ]


def to_text(comp: Comparison) -> str:
    """The table per task and pooled, the mean-over-tasks difference, and every flipped seed."""
    head = ["task", "pairs"]
    for name, _ in METRICS:
        head += [f"{name} A", f"{name} B", f"Δ{name}", f"Δ{name} 95% CI", f"{name} A>B/B>A", "p"]
    rows = [[*head, "A only/B only/errored"], *[_row(c) for c in comp.cells], _row(comp.total)]
    lines = [
        f"A = {comp.a_name}   B = {comp.b_name}   Δ = B − A, paired on (scene, task, seed) trials of both",
        "p: exact McNemar on the discordant pairs (A>B/B>A); errored episodes are not paired trials",
        f"Δ 95% CI: {DIFF_INTERVAL} interval, in points (for runs whose size was fixed in advance)",
        "",
        columns(rows),
        f"TOTAL mean over tasks (each task weighted equally): ΔSR {_pct(comp.mean_diff('success'), True)}  "
        f"ΔHSR {_pct(comp.mean_diff('hard_success'), True)}",
        f"TOTAL pooled over paired episodes: the TOTAL row above ({len(comp.total.pairs)} pairs)",
        "",
        *_verdict_table(comp),
        f"flipped seeds ({len(comp.flips)}):",
    ]
    lines += [
        f"  {f.key[0]}/{f.key[1]} seed {f.key[2]}: A {_outcome(f.a)}, B {_outcome(f.b)}\n"
        f"    A video: {f.video_a or '(none)'}\n    B video: {f.video_b or '(none)'}"
        for f in comp.flips
    ]
    return "\n".join(lines) + "\n"


def _flip_dict(flip: Flip) -> dict[str, Any]:
    return {
        "scene": flip.key[0],
        "task": flip.key[1],
        "seed": flip.key[2],
        "a": _outcome(flip.a),
        "b": _outcome(flip.b),
        "video_a": str(flip.video_a) if flip.video_a else None,
        "video_b": str(flip.video_b) if flip.video_b else None,
    }


def _cell_dict(cell: PairedCell, verdicts: dict[str, TaskVerdict] | None = None) -> dict[str, Any]:
    """A task's or the pooled cell's numbers; `verdicts` (a task's, by metric) adds p_holm and verdict."""
    out: dict[str, Any] = {
        "name": cell.name,
        "pairs": len(cell.pairs),
        "only_a": cell.only_a,
        "only_b": cell.only_b,
        "errored": cell.errored,
    }
    for name, metric in METRICS:
        test = cell.test(metric)
        lo, hi = cell.diff_interval(metric) or (None, None)
        out[name.lower()] = {
            "a": cell.rate(0, metric).as_dict(),
            "b": cell.rate(1, metric).as_dict(),
            "diff": cell.diff(metric),
            "diff_lo": lo,
            "diff_hi": hi,
            "diff_interval": DIFF_INTERVAL,
            "a_only_success": test.b,
            "b_only_success": test.c,
            "p_mcnemar_exact": test.p_value,
        }
        if verdicts is not None:
            out[name.lower()] |= {"p_holm": verdicts[metric].p_holm, "verdict": verdicts[metric].verdict}
    return out


def to_json(comp: Comparison) -> str:
    per_metric = {metric: comp.verdicts(metric) for _, metric in METRICS}
    doc = {
        "a": comp.a_name,
        "b": comp.b_name,
        "diff": "B - A",
        "verdicts": {"alpha": comp.alpha, "test": "exact McNemar", "correction": CORRECTION},
        "tasks": [
            _cell_dict(c, {metric: v[i] for metric, v in per_metric.items()})
            for i, c in enumerate(comp.cells)
        ],
        "pooled": _cell_dict(comp.total),
        "mean_over_tasks": {"sr_diff": comp.mean_diff("success"), "hsr_diff": comp.mean_diff("hard_success")},
        "flips": [_flip_dict(f) for f in comp.flips],
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def _link(video: Path | None, page_dir: Path, label: str) -> str:
    if video is None:
        return f"{label}: no video"
    return f'<a href="{html.escape(os.path.relpath(video, page_dir))}">{label}</a>'


def to_html(comp: Comparison, page: Path) -> str:
    """A static page: the text table, then the flips as rows with a link to each run's video."""
    rows = "".join(
        f"<tr><td>{html.escape(f.key[0])}/{html.escape(f.key[1])}</td><td>{f.key[2]}</td>"
        f"<td>{_outcome(f.a)}</td><td>{_outcome(f.b)}</td>"
        f"<td>{_link(f.video_a, page.parent, 'A video')}</td>"
        f"<td>{_link(f.video_b, page.parent, 'B video')}</td></tr>"
        for f in comp.flips
    )
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>compare</title><style>"
        "body{font:14px system-ui,sans-serif;margin:24px} td,th{border:1px solid #ccc;padding:3px 8px}"
        "table{border-collapse:collapse}</style></head><body>"
        f"<h1>{html.escape(comp.a_name)} vs {html.escape(comp.b_name)}</h1>"
        f"<pre>{html.escape(to_text(comp))}</pre><h2>Flipped seeds</h2><table id=flips>"
        "<tr><th>task</th><th>seed</th><th>A</th><th>B</th><th>A</th><th>B</th></tr>"
        f"{rows}</table></body></html>\n"
    )
