"""Units of work: the slices of a cell's planned seeds that one lease covers.

A unit is what one lease covers. Slices keep the last minutes of a run from being one worker
grinding through a whole cell while the others idle. A unit's key names its cell and its seed index
range in the plan (`<scene>__<task>__<lo>-<hi>`), so raising EVAL_TEST_NUM makes new keys for the new
seeds and never reuses a finished unit's key for a different seed set. Names go into keys and result
paths through `path_part`: a reversible percent-encoding, so a task named by a whole sentence with
quotes or slashes (LIBERO's) stays one readable path component and never collides with another.
Which seeds a cell plans is the run's business (`harness.config.plan`); here a unit is only a key,
its seeds, and the seconds it is expected to take, where earlier records tell (its `rank` orders
claims: longest first).

`UNIT_SEEDS=auto` (`auto_unit_seeds`) is resolved once, when the run is created, and frozen as the
number: the largest slice that still gives each expected slot UNITS_PER_SLOT units, so the run's
tail (the last units, run while other slots idle) is a small part of each slot's work.
"""

from __future__ import annotations

import hashlib
import math
import re
import string
from dataclasses import dataclass, field
from functools import cached_property

_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_PATH_SAFE = frozenset(string.ascii_letters + string.digits + "._ -")
KEY_MAX = 200  # bytes of a lease dir name (NAME_MAX is 255: room for the queue's suffixes)
AUTO = "auto"
UNITS_PER_SLOT = 8  # auto: units per expected slot; the tail is about one unit of a slot's 8 or more


def safe_key(text: str) -> str:
    """A file-name-safe rendering of `text` (metrics file writer ids)."""
    return _KEY_UNSAFE.sub("-", text)


def path_part(name: str) -> str:
    """`name` as one path component, reversibly (`urllib.parse.unquote` gives it back): every character
    outside [A-Za-z0-9._ -], and a leading '.', percent-encoded as UTF-8 bytes. Identity for the
    plain names (ManiSkill's tasks), so their paths and keys are what they always were."""
    encoded = "".join(c if c in _PATH_SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in name)
    return "%2E" + encoded[1:] if encoded.startswith(".") else encoded


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
