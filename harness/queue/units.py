"""Units of work: the slices of a cell's planned seeds that one lease covers.

A unit is what one lease covers. Slices keep the last minutes of a run from being one worker
grinding through a whole cell while the others idle. A unit's key names its cell and its seed index
range in the plan (`<scene>__<task>__<lo>-<hi>`), so raising EVAL_TEST_NUM makes new keys for the new
seeds and never reuses a finished unit's key for a different seed set. Names go into keys through
`harness.pathnames.path_part`, as into result paths: a reversible percent-encoding, so a task named
by a whole sentence with quotes or slashes (LIBERO's) stays one readable path component and never
collides with another. Which seeds a cell plans, and how many a unit takes, is the run's business
(`harness.config.plan`); here a unit is only a key, its seeds, and the seconds it is expected to
take, where earlier records tell (its `rank` orders claims: longest first).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from functools import cached_property

from harness.pathnames import path_part

KEY_MAX = 200  # bytes of a lease dir name (NAME_MAX is 255: room for the queue's suffixes)


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
        """The lease-dir name: the cell's names through `path_part`, then the seed range; a key over
        KEY_MAX bytes is cut and made unique by a hash of the whole."""
        key = f"{path_part(self.scene)}__{path_part(self.task)}__{self.lo}-{self.hi}"
        if len(key.encode()) > KEY_MAX:
            key = key.encode()[: KEY_MAX - 9].decode(errors="ignore") + "." + _digest(key)
        return key


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:8]


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
