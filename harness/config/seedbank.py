"""Seed banks: `<SEEDS_ROOT>/<task>/<task_config>.txt`, space-separated pre-validated episode seeds
(the names through `harness.pathnames.path_part`, as result dirs write them).

One place that says where a unit's bank file is, how it is parsed and which seeds a unit plans to
run, so the manifest, the orchestrators and the sim side agree on them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.config.rundir import Cell, task_config_name
from harness.config.validate import some_of
from harness.pathnames import path_part


class SeedBankError(ValueError):
    """A seed bank file that is missing or malformed; the message names the file."""


def resolve_root(seeds_root: str, bundle: str) -> Path:
    """SEEDS_ROOT is relative to $BUNDLE unless absolute."""
    root = Path(seeds_root)
    return root if root.is_absolute() else Path(bundle) / root


def uses_bank(use_eval_seeds: str) -> bool:
    """USE_EVAL_SEEDS read as a flag: seeds from the bank, or 0..N-1."""
    return use_eval_seeds.strip().lower() not in ("0", "false", "no", "off", "")


def bank_file(root: Path, cell: Cell, bench_config: str) -> Path:
    return root / path_part(cell.task) / f"{path_part(task_config_name(cell.scene, bench_config))}.txt"


def read_bank_file(path: Path) -> list[int]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SeedBankError(f"seed bank file {path} does not exist") from None
    try:
        seeds = [int(field) for field in text.split()]
    except ValueError as exc:
        raise SeedBankError(f"seed bank file {path}: not space-separated integers ({exc})") from None
    if len(set(seeds)) != len(seeds):
        raise SeedBankError(f"seed bank file {path}: repeats a seed")
    negative = [s for s in seeds if s < 0]
    if negative:
        raise SeedBankError(f"seed bank file {path}: seed {negative[0]}: expected integers >= 0")
    return seeds


def read_bank(root: Path, cells: Iterable[Cell], bench_config: str) -> dict[Cell, list[int]]:
    """Every unit's seeds in bank order."""
    return {cell: read_bank_file(bank_file(root, cell, bench_config)) for cell in cells}


def seeds_outside(
    root: Path, bank: Mapping[Cell, list[int]], bench_config: str, space: range, benchmark: str
) -> list[str]:
    """One line per bank file holding a seed outside `space`, the seeds `benchmark` accepts."""
    return [
        f"seed bank file {bank_file(root, cell, bench_config)}: seed(s) {some_of(bad)} are outside what "
        f"BENCHMARK={benchmark} accepts ({space.start}..{space.stop - 1})"
        for cell, seeds in bank.items()
        if (bad := [s for s in seeds if s not in space])
    ]


def bank_sha256(bank: Mapping[Cell, list[int]], bench_config: str) -> str:
    """Hash of the bank's contents (not its location), in a whitespace-independent form."""
    digest = hashlib.sha256()
    for cell in sorted(bank):
        name = f"{cell.task}/{task_config_name(cell.scene, bench_config)}"
        digest.update(f"{name}:{' '.join(map(str, bank[cell]))}\n".encode())
    return digest.hexdigest()
