"""The node-local copy of the code, content-addressed: one directory per version of the code.

Why: workers import the harness, scripts, policy wrappers and benchmark code from local disk, yet an
edit on the shared tree must take effect at the next launch without re-staging envs. Each launch
copies the shared tree's code into `<cache>/code/<name>-<content hash>/` (or reuses that version's
copy), so a worker still running an older version on this node never sees a file change under it:
the code a run's contract hashed stays the code its workers run. The copies in use are held by
their node script (`holds.hold`); the older unheld ones beyond KEEP_VERSIONS are removed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness.config.fingerprint import fingerprint
from harness.node.holds import held

KEEP_VERSIONS = 3  # unheld older code copies kept per node (they are small)
CODE_DIRS = ("harness", "scripts", "policy", "slurm", "tests", "orchestrators")
CODE_FILES = ("env.sh", "pyproject.toml")
_SKIP = {"__pycache__", ".pytest_cache", ".ruff_cache"}
COMPLETE = ".code-version"  # written last: a copy without it is half made, never used


def code_copy(source: Path, cache: Path) -> Path:
    """This version of `source`'s code under `cache` (copied now unless a copy exists); the caller
    holds it (under the node lock, before another launch can look)."""
    parts = [source / n for n in (*CODE_DIRS, *CODE_FILES) if (source / n).exists()]
    version = fingerprint(parts, source, exclude=()).sha256[:16]
    dest = cache / f"{source.name}-{version}"
    if not (dest / COMPLETE).exists():  # callers hold the node lock: no other launch is copying
        shutil.rmtree(dest, ignore_errors=True)  # a copy a crash left half made
        tmp = cache / f".{dest.name}.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        sync_code(source, tmp)
        (tmp / COMPLETE).write_text(version)
        try:
            os.rename(tmp, dest)
        except OSError:  # another launch on this node published the same version meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    os.utime(dest / COMPLETE)
    _drop_old_versions(cache, keep=dest)
    return dest


def _drop_old_versions(cache: Path, keep: Path) -> None:
    versions = sorted((d for d in cache.glob("*/") if (d / COMPLETE).exists() and d != keep),
                      key=lambda d: (d / COMPLETE).stat().st_mtime, reverse=True)  # fmt: skip
    for old in versions[KEEP_VERSIONS:]:
        if not held(old):
            shutil.rmtree(old, ignore_errors=True)


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
