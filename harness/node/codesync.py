"""Refresh the node-local copy of the code from the shared tree at every node start.

Why: workers import the harness, scripts, policy wrappers and benchmark code from local disk, yet an
edit on the shared tree must take effect at the next launch without re-staging envs. Only files whose
size or mtime differ are copied (each via temp file + rename, so a running worker on this node never
reads half a file); files gone from the source are removed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CODE_DIRS = ("harness", "scripts", "policy", "slurm", "tests", "orchestrators")
CODE_FILES = ("env.sh", "pyproject.toml")
_SKIP = {"__pycache__", ".pytest_cache", ".ruff_cache"}


def sync_code(source: Path, dest: Path) -> int:
    """Mirror the code dirs and files of `source` into `dest`; returns how many files were copied."""
    copied = 0
    for name in CODE_DIRS:
        if (source / name).is_dir():
            copied += _mirror_dir(source / name, dest / name)
        elif (dest / name).exists():
            shutil.rmtree(dest / name)
    for name in CODE_FILES:
        if (source / name).is_file():
            copied += _copy_if_changed(source / name, dest / name)
    return copied


def _mirror_dir(src: Path, dst: Path) -> int:
    copied = 0
    wanted: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if d not in _SKIP]
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        wanted.add(dst / rel)
        for name in filenames:
            if name.endswith(".pyc"):
                continue
            wanted.add(dst / rel / name)
            copied += _copy_if_changed(Path(dirpath) / name, dst / rel / name)
    for dirpath, dirnames, filenames in os.walk(dst, topdown=False):
        for name in filenames:
            path = Path(dirpath) / name
            if path not in wanted and path.parent.name != "__pycache__":
                path.unlink()
        for name in dirnames:
            path = Path(dirpath) / name
            if path not in wanted and name not in _SKIP:
                shutil.rmtree(path, ignore_errors=True)
    return copied


def _copy_if_changed(src: Path, dst: Path) -> int:
    st = src.stat()
    try:
        dt = dst.stat()
        if dt.st_size == st.st_size and dt.st_mtime_ns == st.st_mtime_ns:
            return 0
    except FileNotFoundError:
        pass
    tmp = dst.with_name(f".{dst.name}.sync{os.getpid()}")
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)
    return 1
