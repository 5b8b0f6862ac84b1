"""Units of work: the slices of a cell's planned seeds that one lease covers.

A unit is what one lease covers. Slices keep the last minutes of a run from being one worker
grinding through a whole cell while the others idle. A unit's key names its cell and its seed index
range in the plan (`<scene>__<task>__<lo>-<hi>`), so raising EVAL_TEST_NUM makes new keys for the new
seeds and never reuses a finished unit's key for a different seed set. Which seeds a cell plans is
the run's business (`harness.config.plan`); here a unit is only a key and its seeds.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property

_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


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

    @cached_property
    def key(self) -> str:
        """The lease-dir name: readable, file-name-safe, unique even if sanitising collides."""
        raw = f"{self.scene}__{self.task}__{self.lo}-{self.hi}"
        key = safe_key(raw).lstrip(".") or "unit"
        if key != raw:
            key += "." + hashlib.sha1(raw.encode()).hexdigest()[:8]
        return key


def split(scene: str, task: str, task_config: str, seeds: list[int], unit_seeds: int) -> list[Unit]:
    """One unit per slice of `unit_seeds` seeds of a cell (0: the whole cell)."""
    if unit_seeds < 0:
        raise ValueError(f"UNIT_SEEDS={unit_seeds}: expected 0 (whole cells) or a positive count")
    size = unit_seeds if unit_seeds > 0 else max(len(seeds), 1)
    return [
        Unit(scene, task, task_config, lo, min(lo + size, len(seeds)), tuple(seeds[lo : lo + size]))
        for lo in range(0, len(seeds), size)
    ]
