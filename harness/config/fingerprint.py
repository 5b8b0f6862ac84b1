"""Content fingerprints of checkpoints and code trees, for the run manifest.

A fingerprint reads file contents, never mtimes or absolute paths, so a checkpoint or code tree
copied to a node-local cache fingerprints the same as the original on the shared filesystem.
It is bounded in cost: files up to `SMALL_FILE` bytes are hashed whole; a larger file (a weight
shard) contributes its size and the sha256 of its first and last `EDGE` bytes, so fingerprinting a
many-GB checkpoint reads a few MiB per shard. A same-size edit in the middle of a large shard is the
one change this does not see.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SMALL_FILE = 8 << 20
EDGE = 1 << 20
METHOD = "sha256 of small files (<= 8 MiB) whole; size + first/last 1 MiB of larger files"
_SKIP_PARTS = {"__pycache__", ".git", ".pytest_cache", ".ruff_cache"}


@dataclass(frozen=True)
class Fingerprint:
    sha256: str
    files: int
    bytes: int

    def as_dict(self) -> dict[str, object]:
        return {"sha256": self.sha256, "files": self.files, "bytes": self.bytes}


def _file_digest(path: Path, size: int) -> bytes:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        if size <= SMALL_FILE:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        else:
            digest.update(handle.read(EDGE))
            handle.seek(size - EDGE)
            digest.update(handle.read(EDGE))
    return digest.digest()


def _walk(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not _SKIP_PARTS.intersection(p.relative_to(root).parts) and p.suffix != ".pyc"
    )


def fingerprint(paths: Iterable[Path], base: Path | None = None, exclude: Iterable[str] = ()) -> Fingerprint:
    """Fingerprint files and directory trees; names are taken relative to `base` (or each root).

    `exclude` lists names (relative to `base`) of files or directories to leave out.
    """
    skip = tuple(exclude)
    digest = hashlib.sha256()
    count = total = 0
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise FileNotFoundError(f"cannot fingerprint {root}: it does not exist")
        for path in _walk(root):
            anchor = base if base is not None else (root.parent if root.is_file() else root)
            name = path.relative_to(anchor).as_posix()
            if any(name == e or name.startswith(e.rstrip("/") + "/") for e in skip):
                continue
            size = path.stat().st_size
            digest.update(f"{name}\0{size}\0".encode())
            digest.update(_file_digest(path, size))
            count += 1
            total += size
    return Fingerprint(digest.hexdigest(), count, total)
