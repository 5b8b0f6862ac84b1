"""Which checkpoints in a trainer's output directory are complete: present and unchanged for a while.

Why a settle time and not a marker file: trainers (ours, LeRobot, HF's Trainer) and copies (`cp -r`,
rsync, an object-store sync) do not agree on any "done" marker, but every one of them stops touching
a checkpoint's files once it is written. A checkpoint is complete when its file list, sizes and
mtimes have not changed for `settle_s`; one still being written or copied keeps changing and is
never handed out. An entry is a checkpoint when its name ends in the training step (`step_4000`,
`checkpoint-4000`, `4000`); anything else (`last`, `final`, `step_4000.tmp`, hidden names) is not.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

STEP = re.compile(r"^(?:.*[^0-9])?([0-9]+)$")

Signature = tuple[tuple[str, int, int], ...]  # (relative path, size, mtime_ns) of every file


@dataclass(frozen=True, order=True)
class Checkpoint:
    step: int
    path: Path


def step_of(name: str) -> int | None:
    """The training step an entry's name ends in, or None when it names no step checkpoint."""
    if name.startswith("."):
        return None
    match = STEP.match(name)
    return int(match.group(1)) if match else None


def series_prefix(ckpt_dir: Path) -> str:
    """The default name of a directory's series of runs: its name, in the characters a run name holds."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", ckpt_dir.resolve().name).strip("-.") or "watch"


def run_name(prefix: str, step: int) -> str:
    """The run of a series' checkpoint at `step` (zero-padded, so names sort by step)."""
    return f"{prefix}_step{step:07d}"


def signature(path: Path) -> Signature | None:
    """Every file under `path` (or `path` itself) with its size and mtime; None when it is gone or
    holds no file yet."""
    try:
        if path.is_file():
            st = path.stat()
            return (("", st.st_size, st.st_mtime_ns),)
        found = []
        for root, _dirs, files in os.walk(path):
            for name in files:
                full = Path(root) / name
                st = full.stat()
                found.append((str(full.relative_to(path)), st.st_size, st.st_mtime_ns))
    except FileNotFoundError:  # removed while we looked
        return None
    return tuple(sorted(found)) or None


@dataclass
class _Seen:
    signature: Signature | None
    since: float  # when it last changed


@dataclass
class Scan:
    """What one look at the directory found."""

    complete: list[Checkpoint] = field(default_factory=list)  # newly complete this look
    deleted: list[Checkpoint] = field(default_factory=list)  # gone since the last look
    settling: list[Checkpoint] = field(default_factory=list)  # present, not yet unchanged for settle_s


class CheckpointDir:
    """Watches one directory; `look()` says what became complete or was deleted since the last look."""

    def __init__(self, root: Path, settle_s: float, clock: Callable[[], float]) -> None:
        self.root, self.settle_s, self.clock = root, settle_s, clock
        self._seen: dict[Path, _Seen] = {}
        self.complete: dict[Path, Checkpoint] = {}

    def look(self) -> Scan:
        now, scan = self.clock(), Scan()
        try:
            entries = {p: s for p in self.root.iterdir() if (s := step_of(p.name)) is not None}
        except FileNotFoundError:
            entries = {}
        for path in sorted(set(self._seen) - set(entries)):
            gone = self._seen.pop(path)
            if (ckpt := self.complete.pop(path, None)) is not None or gone.signature is not None:
                scan.deleted.append(ckpt or Checkpoint(step_of(path.name) or 0, path))
        for path, step in sorted(entries.items()):
            ckpt = Checkpoint(step, path)
            if path in self.complete:
                continue
            sig = signature(path)
            seen = self._seen.get(path)
            if seen is None or seen.signature != sig:
                self._seen[path] = _Seen(sig, now)
                if sig is not None or seen is None:
                    scan.settling.append(ckpt)
                continue
            if sig is not None and now - seen.since >= self.settle_s:
                self.complete[path] = ckpt
                scan.complete.append(ckpt)
            else:
                scan.settling.append(ckpt)
        return scan
