"""The node-local cache: copy a tree from the shared filesystem once per node, publish it atomically.

Why: mmap of envs and checkpoints over NFS from many nodes stalls, so each node runs from a local copy.
An entry is `<cache>/<kind>/<label>-<key>/<label>` plus a stamp `.stage.json`; `key` is the source's
stat key (paths, sizes, mtimes: not a content fingerprint, which would read every byte), so a changed
source gets a new entry and an unchanged one is reused for the cost of a stat walk. A copy goes to a
temp dir and is renamed into place; the stamp is written last, so an entry without a stamp (a crash,
a full disk) is garbage, never loaded. All changes happen under a node-local lock, so concurrent
jobs on one node stage once. The cache is bounded by pruning the least recently used entries that
are neither in use nor named in CACHE_KEEP; a pruned entry is renamed into the cache's trash under
the lock and deleted after, by a detached `rm` (deleting the 3.8 GB sim env takes ~7 s here, which
neither the pruning launch's start nor the jobs waiting on the lock should pay). A launch chooses
everything it will use first (`want`), so making room for one of its copies never removes another
of its entries, staged or reused.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.node.holds import held
from harness.process.failures import Failed

STAMP = ".stage.json"
USED = ".used"
TRASH = ".trash"  # <cache>/.trash: pruned entries, unstamped, waiting for their deletion
GB = 1 << 30


class StagingError(Failed):
    """Staging failed; the message names the source, the cache and the reason."""


@dataclass(frozen=True)
class Entry:
    """One published cache entry."""

    root: Path  # <cache>/<kind>/<label>-<fp>
    label: str
    size: int
    last_used: float

    @property
    def payload(self) -> Path:
        return self.root / self.label


def stat_key(source: Path, extra: str = "") -> tuple[str, int]:
    """A hash of every path, size and mtime under `source` (plus `extra`), and the total bytes.

    Stat-only, so an unchanged multi-GB env costs one directory walk, not a read.
    """
    digest = hashlib.sha256(extra.encode())
    total = 0
    if source.is_file():
        st = source.stat()
        digest.update(f"{source.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return digest.hexdigest()[:16], st.st_size
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames.sort()
        rel = os.path.relpath(dirpath, source)
        for name in sorted(filenames):
            st = os.lstat(os.path.join(dirpath, name))
            digest.update(f"{rel}/{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            total += st.st_size
    return digest.hexdigest()[:16], total


@contextlib.contextmanager
def node_lock(cache: Path) -> Iterator[None]:
    """Hold the node-local cache lock (flock on a local file: every process of this node waits)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def entries(cache: Path) -> list[Entry]:
    """Every published entry of the cache (those with a stamp)."""
    found = []
    for stamp in cache.glob(f"*/*/{STAMP}"):
        meta = json.loads(stamp.read_text())
        used = stamp.parent / USED
        last = used.stat().st_mtime if used.exists() else stamp.stat().st_mtime
        found.append(Entry(stamp.parent, meta["label"], int(meta["size"]), last))
    return found


@dataclass(frozen=True)
class Wanted:
    """A source chosen for staging and the entry it goes to: known (and so kept from pruning) before
    anything is copied, its stat key taken once."""

    kind: str
    source: Path  # resolved
    extra: str
    key: str  # the stat key
    root: Path  # <cache>/<kind>/<label>-<key>
    size: int

    @property
    def label(self) -> str:
        return self.source.name

    @property
    def payload(self) -> Path:
        return self.root / self.label


def want(cache: Path, kind: str, source: Path, extra: str = "") -> Wanted:
    """Where `source` (with `extra` joining its stat key, e.g. a pin) goes in the cache of `kind`."""
    if not source.exists():
        raise StagingError(f"cannot stage {source}: it does not exist")
    source = source.resolve()
    key, size = stat_key(source, extra)
    return Wanted(kind, source, extra, key, cache / kind / f"{source.name}-{key}", size)


def stage(
    wanted: Wanted,
    *,
    keep: Collection[Path] = (),
    post: Callable[[Path], None] | None = None,
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr),
) -> Path:
    """The node-local copy of `wanted.source`, copied now only if its entry is not published.

    Making room for the copy never removes an entry in `keep` (what the caller's launch uses besides
    this one). `post(payload)` runs on the copy at its final path before the stamp is written (e.g.
    relocating a venv, installing a pin). Call under `node_lock`.
    """
    root, label = wanted.root, wanted.label
    cache = root.parent.parent
    if (root / STAMP).exists():
        (root / USED).touch()
        return wanted.payload
    root.parent.mkdir(parents=True, exist_ok=True)
    _clear_garbage(root.parent)
    _ensure_space(cache, wanted.size, wanted.source, keep={root, *keep})
    tmp = root.parent / f".tmp-{label}-{wanted.key}-{os.getpid()}"
    tmp.mkdir(parents=True)
    start = time.monotonic()
    log(f"[stage] copying {wanted.source} ({wanted.size / GB:.2f} GB) -> {root}")
    try:
        _copy(wanted.source, tmp / label)
        os.rename(tmp, root)
        if post is not None:
            post(root / label)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        raise
    meta = {
        "label": label, "source": str(wanted.source), "stat_key": wanted.key, "size": wanted.size,
        "staged_at": time.time(),
    }  # fmt: skip
    _write_atomic(root / STAMP, json.dumps(meta, indent=1))
    (root / USED).touch()
    log(f"[stage] staged {label} in {time.monotonic() - start:.1f}s")
    return wanted.payload


def prune(cache: Path, max_bytes: int, in_use: set[Path], keep_labels: set[str]) -> list[Path]:
    """Remove least recently used entries until the cache fits `max_bytes`; returns what was removed
    (gone from the cache at once, its bytes deleted in the background: `_empty_trash_later`).

    Entries in use by this node run, entries another live node run on this node holds (`holds`) and
    entries whose label is in `keep_labels` are never removed.
    """
    found = sorted(entries(cache), key=lambda e: e.last_used)
    total = sum(e.size for e in found)
    removed = []
    for entry in found:
        if total <= max_bytes:
            break
        if entry.root in in_use or entry.label in keep_labels or held(entry.root):
            continue
        (entry.root / STAMP).unlink()
        trash = cache / TRASH
        trash.mkdir(exist_ok=True)
        os.rename(entry.root, trash / f"{entry.root.parent.name}-{entry.root.name}-{secrets.token_hex(4)}")
        total -= entry.size
        removed.append(entry.root)
    _empty_trash_later(cache)
    return removed


def _empty_trash_later(cache: Path) -> None:
    """Delete everything in the trash in a background `rm` that outlives this process (sh starts it
    with SIGINT ignored: a ^C to the node script does not cut it short), so the caller returns at
    once. Not in a session of its own: with the kernel's autogroups on (Debian's default), a new
    session's `rm` took 260 s beside a CPU hog per core where one in the caller's took 9. What a
    deletion cut short leaves (the end of a Slurm job kills what is left of it, a reboot), the next
    launch's prune or a short disk (`_ensure_space`) deletes."""
    trash = cache / TRASH
    doomed = [str(path) for path in trash.iterdir()] if trash.is_dir() else []
    if not doomed:
        return
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    # sh exits at once and rm goes on alone, holding no pipe of the caller's (`$(...)` returns)
    subprocess.run(["sh", "-c", 'rm -rf -- "$@" &', "rm", *doomed], **quiet)


def _copy(source: Path, dest: Path) -> None:
    """`cp -a` (keeps symlinks, modes and mtimes; reflinks where the filesystem can)."""
    done = subprocess.run(
        ["cp", "-a", "--reflink=auto", str(source), str(dest)], capture_output=True, text=True
    )
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"cp exit {done.returncode}"
        cache = dest.parent.parent.parent
        what = "node disk full: " if "No space left" in done.stderr else ""
        raise StagingError(f"{what}staging {source} into {cache} failed ({reason}); nothing was published")


def _ensure_space(cache: Path, size: int, source: Path, keep: set[Path]) -> None:
    """Fail before copying when the node disk cannot hold the copy (after emptying the trash and
    dropping unused entries)."""
    margin = 64 << 20
    if shutil.disk_usage(cache).free >= size + margin:
        return
    shutil.rmtree(cache / TRASH, ignore_errors=True)  # what a prune's `rm` has not deleted yet
    if shutil.disk_usage(cache).free >= size + margin:
        return
    for entry in sorted(entries(cache), key=lambda e: e.last_used):
        if entry.root not in keep and time.time() - entry.last_used > 60 and not held(entry.root):
            (entry.root / STAMP).unlink()
            shutil.rmtree(entry.root, ignore_errors=True)
            if shutil.disk_usage(cache).free >= size + margin:
                return
    free = shutil.disk_usage(cache).free
    raise StagingError(
        f"node disk full: staging {source} needs {size / GB:.2f} GB in {cache}, "
        f"only {free / GB:.2f} GB free; nothing was copied"
    )


def _clear_garbage(kind_dir: Path) -> None:
    """Remove temp dirs and stampless entries left by a crashed or failed staging (we hold the lock)."""
    if not kind_dir.exists():
        return
    for child in kind_dir.iterdir():
        if child.is_dir() and not (child / STAMP).exists():
            shutil.rmtree(child, ignore_errors=True)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
