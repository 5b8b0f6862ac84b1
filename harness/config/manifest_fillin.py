"""Fill-ins recorded in the manifest: raise a run's EVAL_TEST_NUM, or add a seed bank disjoint
from the run's banks. The orchestrator that records one and runs its seeds is `harness.launch.fillin`.

Recorded in the manifest's `history`; the contract hash is unchanged. Idempotent: recording what
is already recorded changes nothing. Only the new seeds run (resume reads the records).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.config.contract import check_bank_size
from harness.config.manifest import (
    ContractMismatch,
    Manifest,
    ManifestError,
    bank_entry,
    load_manifest,
    now_iso_seconds,
    seed_banks,
    write_manifest,
)
from harness.config.paths import bundle_root
from harness.config.rundir import Cell, RunDir, read_queue
from harness.config.seedbank import bank_sha256, read_bank, resolve_root
from harness.config.validate import some_of


def _all_banks(manifest: Manifest, cells: list[Cell], bundle: str) -> dict[str, dict[Cell, list[int]]]:
    config = manifest.knobs["BENCH_CONFIG"]
    return {root: read_bank(resolve_root(root, bundle), cells, config) for root, _ in seed_banks(manifest)}


def record_fillin(
    run_dir: Path | str,
    eval_test_num: int | None = None,
    seeds_root: str | None = None,
    env: Mapping[str, str] = os.environ,
    check: Callable[[Manifest], list[str]] | None = None,
) -> Manifest:
    """The manifest with the fill-in recorded (and written), or it unchanged when it already was.
    `check` gets the manifest as it would be written and returns what is wrong with it (the launch
    side checks the seeds it plans against the benchmark's seed space): any problem refuses the
    fill-in, one line each, and the run dir is left as it was."""
    run = RunDir(Path(run_dir))
    manifest = load_manifest(run.root)
    if eval_test_num is None and seeds_root is None:
        raise ValueError("a fill-in needs a higher EVAL_TEST_NUM or a seed bank")
    if eval_test_num is not None and eval_test_num < 1:
        raise ValueError(f"EVAL_TEST_NUM={eval_test_num}: expected a positive integer")
    if manifest.contract["seeds"] is None and seeds_root is not None:
        raise ValueError(f"run {run.root} does not use seed banks (USE_EVAL_SEEDS=0): no bank to add")
    root = seeds_root if seeds_root is not None else manifest.knobs["SEEDS_ROOT"]
    entry = bank_entry(manifest, root)
    if entry is None:
        seeds = _disjoint_bank(manifest, run, root, env)
        n = eval_test_num or seeds["min_per_unit"]
        check_bank_size(n, seeds, root)
        manifest.fillin_banks.append({"seeds_root": root, "seeds": seeds, "eval_test_num": n})
        manifest.history.append(
            {
                "at": now_iso_seconds(),
                "kind": "seed_bank",
                "seeds_root": root,
                "sha256": seeds["sha256"],
                "eval_test_num": n,
            }
        )
    else:
        seeds, limit = entry
        n = eval_test_num or limit
        check_bank_size(n, seeds, root)
        if n <= limit:
            return manifest  # already recorded: re-running a fill-in changes nothing
        manifest.history.append(
            {"at": now_iso_seconds(), "kind": "eval_test_num", "seeds_root": root, "from": limit, "to": n}
        )
        if root == manifest.knobs["SEEDS_ROOT"]:
            manifest.eval_test_num = n
        else:
            next(b for b in manifest.fillin_banks if b["seeds_root"] == root)["eval_test_num"] = n
    if check is not None and (problems := check(manifest)):
        raise ManifestError(f"refusing the fill-in of {run.root}:\n" + "\n".join(f"  {p}" for p in problems))
    write_manifest(run.manifest, manifest, exclusive=False)
    return manifest


def _disjoint_bank(manifest: Manifest, run: RunDir, root: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The seeds section of a new bank, after checking it shares no seed with the run's banks."""
    cells = read_queue(run.queue)
    bundle = str(bundle_root(env))
    config = manifest.knobs["BENCH_CONFIG"]
    bank = read_bank(resolve_root(root, bundle), cells, config)
    overlaps = []
    for other_root, other in _all_banks(manifest, cells, bundle).items():
        for cell in cells:
            shared = sorted(set(bank[cell]) & set(other[cell]))
            if shared:
                overlaps.append(f"{cell.scene} {cell.task}: seeds {some_of(shared)} are also in {other_root}")
    if overlaps:
        raise ContractMismatch(f"seed bank {root} is not disjoint from the run's banks:", overlaps)
    return {"sha256": bank_sha256(bank, config), "min_per_unit": min(len(s) for s in bank.values())}
