"""Units of work: the slices of a cell's planned seeds that one lease covers.

A unit is what one lease covers. Slices keep the last minutes of a run from being one worker
grinding through a whole cell while the others idle. A unit's key names its cell and its seed index
range in the plan (`<scene>__<task>__<lo>-<hi>`), so raising EVAL_TEST_NUM makes new keys for the new
seeds and never reuses a finished unit's key for a different seed set. Names go into keys and result
paths through `path_part`: a reversible percent-encoding, so a task named by a whole sentence with
quotes or slashes (LIBERO's) stays one readable path component and never collides with another.
Which seeds a cell plans is the run's business (`harness.config.plan`); here a unit is only a key
and its seeds.
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass
from functools import cached_property

_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_PATH_SAFE = frozenset(string.ascii_letters + string.digits + "._ -")
KEY_MAX = 200  # bytes of a lease dir name (NAME_MAX is 255: room for the queue's suffixes)


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


def split(scene: str, task: str, task_config: str, seeds: list[int], unit_seeds: int) -> list[Unit]:
    """One unit per slice of `unit_seeds` seeds of a cell (0: the whole cell)."""
    if unit_seeds < 0:
        raise ValueError(f"UNIT_SEEDS={unit_seeds}: expected 0 (whole cells) or a positive count")
    size = unit_seeds if unit_seeds > 0 else max(len(seeds), 1)
    return [
        Unit(scene, task, task_config, lo, min(lo + size, len(seeds)), tuple(seeds[lo : lo + size]))
        for lo in range(0, len(seeds), size)
    ]
