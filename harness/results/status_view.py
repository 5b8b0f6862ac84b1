"""The status display (rich): one screen that answers "how far along is this run, and is it healthy?"."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from harness.results.status import Status


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def render(status: Status) -> Group:
    """Summary lines, the live leases table (stale ones flagged), and recent errors."""
    counts = status.counts
    head = Text()
    head.append(f"run {status.run.root}", style="bold")
    head.append(f"   (units planned from {status.plan_source})\n")
    head.append(
        f"units: {len(status.units)}  done {counts['done']}  leased {counts['leased']}  "
        f"pending {counts['pending']}  quarantined {counts['quarantined']}"
        + (f"  skipped (cell decided) {counts['skipped']}" if status.adaptive else "")
        + "\n"
    )
    pct = f" ({100 * status.done / status.planned:.0f}%)" if status.planned else ""
    head.append(
        f"episodes: {status.done} of {status.planned} done{pct}, {status.errored} errored (to re-run)"
        + (f", {status.invalid} invalid (success before the policy acted)" if status.invalid else "")
        + "\n"
    )
    head.append(
        f"success so far: SR {status.sr.text().strip()}   HSR {status.hsr.text().strip()}"
        f"   ({status.sr.label} intervals)\n"
    )
    rate = "—" if status.per_hour is None else f"{status.per_hour:.1f} episodes/h"
    head.append(f"throughput: {rate}   ETA: {_duration(status.eta_s)}")
    if status.adaptive is not None:
        head.append(f"\n{status.adaptive.summary_line()}", style="cyan")
    for warning in status.warnings:
        head.append(f"\nwarning: {warning}", style="yellow")
    leases = Table(title=f"live leases ({len(status.leases)})", title_justify="left", expand=False)
    for column in ("unit", "owner", "job", "heartbeat age"):
        leases.add_column(column, no_wrap=True)
    leases.add_column("state")
    for unit in status.leases:
        owner = unit.owner or {}
        who = f"{owner.get('host', '?')}:{owner.get('pid', '?')} {owner.get('worker', '')}".strip()
        state = Text(f"STALE: {unit.stale}", style="bold red") if unit.stale else Text("alive", style="green")
        age = "—" if unit.heartbeat_age is None else f"{unit.heartbeat_age:.0f} s"
        leases.add_row(unit.key, who, str(owner.get("slurm_job_id") or "—"), age, state)
    errors = Text("recent errors:" + ("" if status.recent_errors else " none"), style="bold")
    for line in status.recent_errors:
        errors.append("\n  " + line, style="red")
    return Group(head, *_cells(status), *_latency(status), *_nodes(status), leases, errors)


def _latency(status: Status) -> list[Table]:
    """The policy round trips per task so far (empty while no record carries them)."""
    if not status.latency:
        return []
    table = Table(title="policy round trips per task", title_justify="left", expand=False)
    for column in ("scene", "task", "episodes", "round trips", "p50 ms", "p95 ms (worst episode)"):
        table.add_column(column, no_wrap=True)
    for (scene, task), lat in status.latency.items():
        p50 = "—" if lat.p50_ms is None else f"{lat.p50_ms:.1f}"
        p95 = "—" if lat.p95_ms is None else f"{lat.p95_ms:.1f}"
        table.add_row(scene, task, str(lat.episodes), str(lat.calls), p50, p95)
    return [table]


def _cells(status: Status) -> list[Table]:
    """An adaptive run's cells and their states, decided ones first (empty for a fixed run)."""
    if status.adaptive is None:
        return []
    table = Table(title="cells (EVAL_STOP)", title_justify="left", expand=False)
    for column in ("scene", "task", "state", "trials", "after decision", "saved"):
        table.add_column(column, no_wrap=True)
    verdicts = sorted(status.adaptive.verdicts.items(), key=lambda kv: (kv[1].state != "decided", kv[0]))
    for (scene, task), v in verdicts:
        style = "green" if v.state == "decided" else ("yellow" if v.state == "capped" else "")
        table.add_row(
            scene, task, Text(v.text, style=style), f"{v.ran}/{v.planned}", str(v.after), str(v.saved)
        )
    return [table]


def _nodes(status: Status) -> list[Table]:
    """The records' node fingerprints: which nodes simulated them, and on what."""
    if not status.node_groups:
        return []
    table = Table(title="node fingerprints", title_justify="left", expand=False)
    for column in ("fingerprint", "episodes", "nodes (episodes)"):
        table.add_column(column, no_wrap=True)
    table.add_column("canary")
    table.add_column("what it is")
    for group in status.node_groups:
        canary = Text(group.canary_text(), style="bold red" if group.differs else "")
        table.add_row(group.ident, str(group.episodes), group.nodes, canary, group.describe())
    return [table]
