"""Units of work: the slices of a cell's planned seeds that one lease covers.

A unit is what one lease covers. Slices keep the last minutes of a run from being one worker
grinding through a whole cell while the others idle. A unit's key names its cell and its seed index
range in the plan (`<scene>__<task>__<lo>-<hi>`), so raising EVAL_TEST_NUM makes new keys for the new
seeds and never reuses a finished unit's key for a different seed set. Which seeds a cell plans is
the run's business (`harness.config.plan`); here a unit is only a key, its seeds, and the seconds
it is expected to take, where earlier records tell (its `rank` orders claims: longest first).

`UNIT_SEEDS=auto` (`auto_unit_seeds`) is resolved once, when the run is created, and frozen as the
number: the largest slice that still gives each expected slot UNITS_PER_SLOT units, so the run's
tail (the last units, run while other slots idle) is a small part of each slot's work.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from functools import cached_property

_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
AUTO = "auto"
UNITS_PER_SLOT = 8  # auto: units per expected slot; the tail is about one unit of a slot's 8 or more


def safe_key(text: str) -> str:
    """A file-name-safe rendering of `text` (lease dir names, metrics file writer ids)."""
    return _KEY_UNSAFE.sub("-", text)


@dataclass(frozen=True)
class Unit:
    scene: str
    task: str
    task_config: str
    lo: int  # index range [lo, hi) into the cell's planned seeds
    hi: int
    seeds: tuple[int, ...]
    cost_s: float = field(default=0.0, compare=False)  # expected seconds (0: unknown)

    @property
    def rank(self) -> int:
        """Claim priority, higher first: the cost's power of two, so units of about the same cost
        tie and keep the queue's random order among them (workers do not all race for one key)."""
        return math.floor(math.log2(self.cost_s)) + 1 if self.cost_s >= 1 else 0

    @cached_property
    def key(self) -> str:
        """The lease-dir name: readable, file-name-safe, unique even if sanitising collides."""
        raw = f"{self.scene}__{self.task}__{self.lo}-{self.hi}"
        key = safe_key(raw).lstrip(".") or "unit"
        if key != raw:
            key += "." + hashlib.sha1(raw.encode()).hexdigest()[:8]
        return key


def split(
    scene: str, task: str, task_config: str, seeds: list[int], unit_seeds: int, seed_cost_s: float = 0.0
) -> list[Unit]:
    """One unit per slice of `unit_seeds` seeds of a cell (0: the whole cell); `seed_cost_s`: the
    expected seconds of one of its episodes (0: unknown)."""
    if unit_seeds < 0:
        raise ValueError(f"UNIT_SEEDS={unit_seeds}: expected 0 (whole cells) or a positive count")
    size = unit_seeds if unit_seeds > 0 else max(len(seeds), 1)
    units = []
    for lo in range(0, len(seeds), size):
        part = tuple(seeds[lo : lo + size])
        units.append(Unit(scene, task, task_config, lo, lo + len(part), part, seed_cost_s * len(part)))
    return units


def parse_unit_seeds(value: str) -> int | None:
    """UNIT_SEEDS's value: None for `auto`, else the count (0: whole cells); a clear error otherwise."""
    text = value.strip().lower()
    if text == AUTO:
        return None
    if not text.isdigit():
        raise ValueError(f"knob UNIT_SEEDS={value!r}: expected auto, 0 (whole cells) or a positive count")
    return int(text)


def auto_unit_seeds(cells: int, seeds_per_cell: int, slots: int) -> tuple[int, str]:
    """UNIT_SEEDS=auto for `cells` cells of `seeds_per_cell` seeds over `slots` expected sim slots:
    the slice size, and a line saying why."""
    total = cells * seeds_per_cell
    size = max(1, min(seeds_per_cell, total // (UNITS_PER_SLOT * max(slots, 1))))
    units = cells * math.ceil(seeds_per_cell / size) if seeds_per_cell else 0
    return size, (
        f"UNIT_SEEDS=auto: {size} ({cells} cells x {seeds_per_cell} seeds, {slots} expected slots, "
        f"at least {UNITS_PER_SLOT} units a slot where seeds allow: {units} units)"
    )
