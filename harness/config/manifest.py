"""The run manifest (`run.yaml`): the frozen conditions of a run, read and written atomically.

A run dir's results are only comparable if every episode in it was produced under the same
conditions. The manifest freezes those conditions when the run is created (`harness.config.create`),
and every worker checks its own environment against it (`harness.config.contract`) before it runs
anything, so a changed knob cannot silently mix two evals in one run dir. Fill-ins
(`harness.config.manifest_fillin`) add seeds without changing the contract; `harness.config.plan`
turns the manifest into the seeds and units the workers run.

`contract_hash(manifest)` is the sha256 of the manifest's `contract` section (canonical JSON):
everything but EVAL_TEST_NUM, the fill-in banks, the history and the informational `info`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from harness.config.rundir import RunDir

FORMAT = 1


class ContractMismatch(ValueError):
    """A launch whose environment differs from the run's manifest; `differences` names each one."""

    def __init__(self, headline: str, differences: list[str]) -> None:
        super().__init__(headline + "".join(f"\n  - {d}" for d in differences))
        self.differences = differences


class ManifestError(ValueError):
    """A run.yaml that is missing, malformed or edited by hand."""


@dataclass
class Manifest:
    run: str
    contract: dict[str, Any]
    eval_test_num: int
    fillin_banks: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def knobs(self) -> dict[str, str]:
        return self.contract["knobs"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "run": self.run,
            "contract_hash": contract_hash(self),
            "contract": self.contract,
            "eval_test_num": self.eval_test_num,
            "fillin_banks": self.fillin_banks,
            "history": self.history,
            "info": self.info,
        }


def contract_hash(manifest: Manifest) -> str:
    text = json.dumps(manifest.contract, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def now_iso_seconds() -> str:
    """When a manifest entry was made (created_at, history): ISO 8601 UTC to the second, for people."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_manifest(path: Path, manifest: Manifest, exclusive: bool) -> None:
    """Write atomically: temp file then rename, or hard link when the file must not exist yet."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".run.yaml.")
    try:
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(manifest.as_dict(), handle, sort_keys=False, default_flow_style=False)
        if exclusive:
            os.link(tmp, path)  # atomic create-if-absent, also on NFS
        else:
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_manifest(run_dir: Path | str) -> Manifest:
    path = RunDir(Path(run_dir)).manifest
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ManifestError(
            f"{path} does not exist: {path.parent} is not a created run; create it with "
            f"scripts/new_run.py {path.parent} --queue <queue file>"
        ) from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError(f"{path}: not a run manifest of format {FORMAT}")
    try:
        manifest = Manifest(
            run=data["run"],
            contract=data["contract"],
            eval_test_num=int(data["eval_test_num"]),
            fillin_banks=data.get("fillin_banks") or [],
            history=data.get("history") or [],
            info=data.get("info") or {},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"{path}: malformed manifest ({exc!r})") from None
    if contract_hash(manifest) != data.get("contract_hash"):
        raise ManifestError(
            f"{path}: its contract section no longer matches its contract_hash (edited by hand?); "
            "create a new run instead of editing run.yaml"
        )
    return manifest



def bank_entry(manifest: Manifest, seeds_root: str) -> tuple[dict[str, Any] | None, int] | None:
    """(seeds section, EVAL_TEST_NUM limit) recorded for `seeds_root`, or None if the run has no such bank."""
    if seeds_root == manifest.knobs["SEEDS_ROOT"]:
        return manifest.contract["seeds"], manifest.eval_test_num
    for bank in manifest.fillin_banks:
        if bank["seeds_root"] == seeds_root:
            return bank["seeds"], int(bank["eval_test_num"])
    return None


def seed_banks(manifest: Manifest) -> list[tuple[str, int]]:
    """(SEEDS_ROOT, EVAL_TEST_NUM) of each bank the run draws from: the original first, then fill-ins."""
    return [(manifest.knobs["SEEDS_ROOT"], manifest.eval_test_num)] + [
        (b["seeds_root"], int(b["eval_test_num"])) for b in manifest.fillin_banks
    ]
