"""Find a run dir and read its records, refusing what cannot be summarised honestly.

A missing or empty run is an error (an empty table would read as 0%), torn last lines are ignored and
counted, malformed records are left out and named by file:line, and records from more than one contract
hash are refused unless the caller splits by contract: averaging two configs into one number hides that
they measured different things.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.config.paths import run_dir
from harness.config.rundir import RunDir
from harness.episode import canary, nodeprint
from harness.episode.nodeprint import UNKNOWN
from harness.episode.records import RecordSet, line_warnings, read_tree
from harness.results import ResultsError

NO_CONTRACT = "(none)"


@dataclass
class LoadedRun:
    """The deduplicated records of one run, with what was wrong with its files."""

    run: RunDir
    records: list[dict[str, Any]]
    torn_lines: list[str] = field(default_factory=list)
    bad_lines: list[str] = field(default_factory=list)
    files: int = 0

    def warnings(self) -> list[str]:
        return line_warnings(self.torn_lines, self.bad_lines)


def resolve_run(run: str, runs_root: str | None = None) -> RunDir:
    """A run given as a path, or as a name under $RUNS_ROOT; a clear error when neither exists."""
    path = run_dir(run, {"RUNS_ROOT": runs_root} if runs_root else os.environ)
    if not path.is_dir():
        raise ResultsError(f"run {run!r} not found (looked for {path})")
    return RunDir(path.resolve())


def load_run(run: RunDir) -> LoadedRun:
    """All deduplicated records of `run`; an error when it holds none."""
    found: RecordSet = read_tree(run.results)
    loaded = LoadedRun(run, list(found.records.values()), found.torn_lines, found.bad_lines, found.files)
    if not found.files:
        raise ResultsError(f"run {run.root} has no episode records: no _metrics*.jsonl under {run.results}")
    if not loaded.records:
        raise ResultsError(
            f"run {run.root} has {found.files} record file(s) but no readable episode record "
            f"({len(found.torn_lines)} torn, {len(found.bad_lines)} malformed lines)"
        )
    return loaded


def contract_of(record: dict[str, Any]) -> str:
    return str(record.get("contract") or NO_CONTRACT)


def scene_of(record: dict[str, Any]) -> str:
    """The record's scene (older records without one fall back to their task_config)."""
    return str(record.get("scene") or record["task_config"])


EpisodeKey = tuple[str, str, int]


def episode_key(record: dict[str, Any]) -> EpisodeKey:
    """(scene, task, seed): how episodes are named across the results tools and paired across runs."""
    return (scene_of(record), record["task"], int(record["seed"]))


def split_by_contract(records: list[dict[str, Any]], allow_split: bool) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by contract hash; more than one group is refused unless `allow_split`."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(contract_of(record), []).append(record)
    if len(groups) > 1 and not allow_split:
        counts = Counter({c: len(rs) for c, rs in groups.items()})
        listing = "\n".join(f"  {c}: {n} record(s)" for c, n in counts.most_common())
        raise ResultsError(
            f"records carry {len(groups)} different contract hashes (mixed configs):\n{listing}\n"
            "refusing to pool them; pass --split-by-contract to get one result set per contract"
        )
    return groups


@dataclass
class NodeGroup:
    """The records of one node fingerprint (`harness.episode.nodeprint`); records without one (written
    before fingerprints) form the one `unknown` group."""

    ident: str
    doc: dict[str, Any] | None  # the stored fingerprint; None for unknown, or a file that is missing
    episodes: int = 0
    hosts: Counter = field(default_factory=Counter)  # host → episodes
    canary: dict[str, Any] | None = None  # its sim side's canary verdict (`harness.episode.canary`)

    @property
    def differs(self) -> bool:
        """Its canary ran and did not match the run's reference."""
        return self.canary is not None and not self.canary.get("match", True)

    def canary_text(self) -> str:
        c = self.canary
        if c is None:
            return "no canary" if self.doc else "no canary (no fingerprint)"
        if c.get("is_reference"):
            return f"canary is the reference ({c.get('host')})"
        if c.get("match"):
            return f"canary matches the reference ({c.get('reference_host')})"
        psnr = c.get("frame_psnr")
        frame = "n/a" if psnr is None else psnr if isinstance(psnr, str) else f"{psnr:.1f} dB"
        return (
            f"canary DIFFERS from the reference ({c.get('reference_host')}): first at step "
            f"{c.get('first_difference')}, largest state difference {c.get('max_state_diff'):.3g}, "
            f"frame PSNR {frame}"
        )

    @property
    def nodes(self) -> str:
        return ", ".join(f"{host} ({n})" for host, n in sorted(self.hosts.items()))

    def describe(self) -> str:
        if self.ident == UNKNOWN and self.doc is None:
            return nodeprint.describe(None)
        return nodeprint.describe(self.doc) if self.doc else "fingerprint file missing from the run dir"

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.ident, "episodes": self.episodes, "hosts": dict(sorted(self.hosts.items())),
            "describe": self.describe(), "canary": self.canary_text(), "canary_differs": self.differs,
        }  # fmt: skip


def fingerprint_of(record: dict[str, Any]) -> str:
    return str(record.get("fingerprint") or UNKNOWN)


def node_groups(run: RunDir, records: list[dict[str, Any]]) -> list[NodeGroup]:
    """The run's records grouped by node fingerprint, largest first."""
    stored, verdicts = nodeprint.read_all(run.root), canary.read_verdicts(run.root)
    groups: dict[str, NodeGroup] = {}
    for record in records:
        ident = fingerprint_of(record)
        if ident not in groups:
            doc = stored.get(ident)
            groups[ident] = NodeGroup(ident, doc, canary=verdicts.get(nodeprint.sim_id(doc)) if doc else None)
        groups[ident].episodes += 1
        groups[ident].hosts[str(record.get("host") or "?")] += 1
    return sorted(groups.values(), key=lambda g: (-g.episodes, g.ident))


def check_pooling(run: RunDir, records: list[dict[str, Any]], allow_mixed: bool) -> list[NodeGroup]:
    """The node groups of `records`; refused (ResultsError, exit 2) when some group's canary differs
    from the run's reference, unless `allow_mixed`: pooling them would average two simulators."""
    groups = node_groups(run, records)
    if allow_mixed or not any(g.differs for g in groups):
        return groups
    listing = "\n".join(
        f"  {g.ident}: {g.episodes} episode(s) on {g.nodes}; {g.canary_text()}" for g in groups
    )
    raise ResultsError(
        f"run {run.root}: records come from {len(groups)} node fingerprint groups and the canary of "
        f"{sum(g.differs for g in groups)} of them differs from the run's reference (those nodes simulate "
        f"the run's episodes differently):\n{listing}\nrefusing to pool them. Find what differs "
        f"({run.root}/fingerprints/<id>.json holds each group's node in full), re-run that group's "
        "episodes on nodes whose canary matches, or pass --allow-mixed to pool them anyway and get "
        "each group's table beside the pooled one"
    )
