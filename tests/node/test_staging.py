"""Node-local staging: copy once, atomic publish, re-stage on change, bounded cache, full disk, venvs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.node import holds, staging
from harness.node.staging import StagingError, entries, prune, stage, want
from harness.node.venvs import install_pin, relocate

ROOT = Path(__file__).resolve().parents[2]
NOT_HERE = 2**22 + 12345  # above any pid_max: no process here has it


def until(condition: Callable[[], bool], what: str, deadline_s: float = 60.0) -> None:
    """Poll `condition` with a generous deadline (a busy machine is slow, never wrong)."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def make_tree(path: Path, files: dict[str, int]) -> Path:
    for name, size in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(os.urandom(size))
    return path


def test_stage_copies_once_and_restages_on_change(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "ckpt-a", {"model.bin": 4096, "cfg/config.json": 10})
    logs: list[str] = []
    first = stage(want(tmp_path / "cache", "ckpt", src), log=logs.append)
    again = stage(want(tmp_path / "cache", "ckpt", src), log=logs.append)
    assert first == again and first.name == "ckpt-a"
    assert (first / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
    assert sum("copying" in line for line in logs) == 1
    (src / "model.bin").write_bytes(b"changed")
    changed = stage(want(tmp_path / "cache", "ckpt", src), log=logs.append)
    assert changed != first and (changed / "model.bin").read_bytes() == b"changed"
    assert not list((tmp_path / "cache" / "ckpt").glob(".tmp-*"))


def test_failed_post_step_publishes_nothing(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "env", {"a": 10})

    def boom(_copy: Path) -> None:
        raise StagingError("post failed")

    with pytest.raises(StagingError, match="post failed"):
        stage(want(tmp_path / "cache", "env", src), post=boom, log=lambda _m: None)
    assert entries(tmp_path / "cache") == []
    assert list((tmp_path / "cache" / "env").iterdir()) == []


def test_missing_source_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StagingError, match="does not exist"):
        stage(want(tmp_path / "cache", "ckpt", tmp_path / "nope"), log=lambda _m: None)


def test_concurrent_stagers_on_one_node_copy_once(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "ckpt", {"w.bin": 1 << 20})
    code = textwrap.dedent(f"""
        from pathlib import Path
        from harness.node.staging import node_lock, stage, want
        with node_lock(Path({str(tmp_path / "cache")!r})):
            print(stage(want(Path({str(tmp_path / "cache")!r}), "ckpt", Path({str(src)!r}))))
    """)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len({out.strip() for out, _ in outs}) == 1
    assert sum("copying" in err for _, err in outs) == 1


def stage_tree(cache: Path, kind: str, source: Path) -> Path:
    return stage(want(cache, kind, make_tree(source, {"w.bin": 100_000})), log=lambda _m: None)


def test_prune_keeps_in_use_and_cache_keep_drops_least_recently_used(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    staged = {}
    for i, name in enumerate(["old", "keepme", "mid", "new"]):
        src = make_tree(tmp_path / name, {"w.bin": 100_000})
        staged[name] = stage(want(cache, "ckpt", src), log=lambda _m: None)
        os.utime(staged[name].parent / staging.USED, (1000 + i, 1000 + i))
    removed = prune(cache, 250_000, in_use={staged["new"].parent}, keep_labels={"keepme"})
    assert removed == [staged["old"].parent, staged["mid"].parent]
    assert sorted(e.label for e in entries(cache)) == ["keepme", "new"]


def test_prune_deletes_no_bytes_itself_and_a_detached_rm_empties_the_trash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 24 (start-up off the critical path): prune deleted each entry with `shutil.rmtree`
    under the node lock, ~7 s for the staged 3.8 GB sim env here, paid by the launch's start and
    by every job on the node waiting for the lock. Now it only renames the entry into the trash."""
    cache = tmp_path / "cache"
    old = stage_tree(cache, "env", tmp_path / "old")
    new = stage_tree(cache, "ckpt", tmp_path / "new")
    os.utime(old.parent / staging.USED, (1000, 1000))
    leftover = make_tree(cache / staging.TRASH / "cut-short", {"w.bin": 1000})  # an rm a reboot stopped

    def rmtree(path: Path, *args: object, **kwargs: object) -> None:
        raise AssertionError(f"prune deleted {path} in the caller's process, under the node lock")

    monkeypatch.setattr(staging.shutil, "rmtree", rmtree)
    assert prune(cache, 1 << 30, in_use={new.parent}, keep_labels=set()) == []  # nothing to prune
    until(lambda: not leftover.exists(), "a prune left what an earlier deletion did not finish")
    assert prune(cache, 150_000, in_use={new.parent}, keep_labels=set()) == [old.parent]
    assert not old.parent.exists() and [e.label for e in entries(cache)] == ["new"]
    until(lambda: not any((cache / staging.TRASH).iterdir()), "the trash was never emptied")
    assert new.exists() and (new / "w.bin").stat().st_size == 100_000


def test_prune_never_removes_an_entry_another_live_node_run_holds(tmp_path: Path) -> None:
    """Issue 11, item 10: pruning protected only the current launch's entries; a concurrent job on
    the same node could lose the staged venv it was running from."""
    cache = tmp_path / "cache"
    ours = stage_tree(cache, "ckpt", tmp_path / "ours")
    theirs = stage_tree(cache, "env", tmp_path / "theirs")
    os.utime(theirs.parent / staging.USED, (1000, 1000))  # the least recently used: first to go
    other_job = subprocess.Popen(["sleep", "600"])
    try:
        holds.hold([theirs.parent], other_job.pid)
        assert prune(cache, 0, in_use={ours.parent}, keep_labels=set()) == []
        assert theirs.exists()
    finally:
        other_job.kill()
        other_job.wait()
    until(lambda: not holds.held(theirs.parent), "the keeper outlived the node run it held for")
    assert prune(cache, 0, in_use={ours.parent}, keep_labels=set()) == [theirs.parent]  # its holder is gone


def test_a_hold_from_another_pid_namespace_is_never_judged_by_pid(tmp_path: Path) -> None:
    """Issue 20, item 2: a node run in a container on this node (its own PID namespace) holds an
    entry; its holder's pid means nothing here (no such process), yet the hold is live."""
    cache = tmp_path / "cache"
    theirs = stage_tree(cache, "env", tmp_path / "theirs")
    mark = theirs.parent / f"{holds.HOLD_PREFIX}{NOT_HERE}.c0ffee"
    lock = "fcntl.flock(os.open(sys.argv[1], os.O_RDWR | os.O_CREAT), fcntl.LOCK_SH); time.sleep(600)"
    # what that container's keeper does: a shared lock on its mark, for as long as its node run lives
    keeper = subprocess.Popen([sys.executable, "-c", f"import fcntl, os, sys, time; {lock}", mark])
    try:
        until(lambda: holds.held(theirs.parent), "the container's keeper never took its lock")
        assert prune(cache, 0, in_use=set(), keep_labels=set()) == []
        assert theirs.exists() and mark.exists()
    finally:
        keeper.kill()
        keeper.wait()
    assert prune(cache, 0, in_use=set(), keep_labels=set()) == [theirs.parent]  # its keeper is gone


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_a_node_run_in_a_real_pid_namespace_holds_its_entries(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    theirs = stage_tree(cache, "env", tmp_path / "theirs")
    code = textwrap.dedent(f"""
        import os, time
        from pathlib import Path
        from harness.node.holds import hold
        hold([Path({str(theirs.parent)!r})], os.getpid())  # pid 1 of its namespace
        print("held", flush=True)
        time.sleep(600)
    """)
    run = subprocess.Popen(  # killing unshare kills the namespace's pid 1, and so all of it
        ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", sys.executable, "-c", code],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert run.stdout is not None and run.stdout.readline().strip() == "held"
        assert prune(cache, 0, in_use=set(), keep_labels=set()) == []
    finally:
        run.kill()
        run.wait()
    until(lambda: not holds.held(theirs.parent), "the keeper outlived its node run")
    assert prune(cache, 0, in_use=set(), keep_labels=set()) == [theirs.parent]


def test_full_node_disk_is_a_clear_error_and_nothing_half_copied(tmp_path: Path) -> None:
    """A real 2 MiB tmpfs as the node cache, in a private mount namespace (needs root)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a small tmpfs")
    src = make_tree(tmp_path / "big-ckpt", {"a.bin": 1 << 20, "b.bin": 1 << 20, "c.bin": 1 << 20})
    cache = tmp_path / "small"
    cache.mkdir()
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from harness.node import holds, staging
        cache, src = Path({str(cache)!r}), Path({str(src)!r})
        if sys.argv[1] == "midcopy":
            staging._ensure_space = lambda *a, **k: None   # let the copy itself hit ENOSPC
        try:
            staging.stage(staging.want(cache, "ckpt", src), log=lambda m: None)
        except staging.StagingError as err:
            print("ERROR", err)
        print("LEFT", sorted(str(p.relative_to(cache)) for p in cache.glob("ckpt/*")))
    """)
    for mode in ("precheck", "midcopy"):
        cmd = f'mount -t tmpfs -o size=2m tmpfs {cache} && {sys.executable} -c "$0" {mode}'
        done = subprocess.run(
            ["unshare", "--mount", "sh", "-c", cmd, script],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "ERROR node disk full" in done.stdout, done.stdout
        assert "LEFT []" in done.stdout, done.stdout


def test_a_short_disk_empties_the_trash_before_refusing(tmp_path: Path) -> None:
    """A pruned entry whose background deletion has not finished still holds its bytes: a staging
    that needs them deletes the rest itself instead of calling the disk full (an 80 MiB tmpfs: a
    copy needs its size and a 64 MiB margin free)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a small tmpfs")
    src = make_tree(tmp_path / "ckpt", {"a.bin": 8 << 20})
    cache = tmp_path / "small"
    cache.mkdir()
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from harness.node import staging
        cache, src = Path({str(cache)!r}), Path({str(src)!r})
        pruned = cache / staging.TRASH / "env-sim-0123"
        pruned.mkdir(parents=True)
        (pruned / "lib.so").write_bytes(os.urandom(20 << 20))  # 20 MiB not yet deleted
        print("STAGED", staging.stage(staging.want(cache, "ckpt", src), log=lambda m: None))
        print("TRASH", pruned.exists())
    """)
    cmd = f'mount -t tmpfs -o size=80m tmpfs {cache} && {sys.executable} -c "$0"'
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", cmd, script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert f"STAGED {cache}/ckpt/ckpt-" in done.stdout and "TRASH False" in done.stdout, done.stdout


@pytest.fixture(scope="module")
def small_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("venvs") / "tiny"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    return venv


def test_staged_venv_runs_from_its_new_path(tmp_path: Path, small_venv: Path) -> None:
    src = tmp_path / "shared" / "tiny"
    shutil.copytree(small_venv, src, symlinks=True)
    relocate(src, small_venv)  # the "shared" env, as if created at its path
    staged = stage(want(tmp_path / "cache", "env", src), post=lambda c: relocate(c, src), log=lambda _m: None)
    src.rename(tmp_path / "shared" / "gone")  # nothing may still point at the source
    prefix = subprocess.run(
        [staged / "bin" / "python", "-c", "import sys; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert prefix.stdout.strip() == str(staged)
    pip = subprocess.run([staged / "bin" / "pip", "--version"], capture_output=True, text=True, check=True)
    assert str(staged) in pip.stdout
    assert str(src) not in (staged / "bin" / "activate").read_text()


def test_unsatisfiable_pin_names_pin_and_wheelhouse(tmp_path: Path, small_venv: Path) -> None:
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    with pytest.raises(
        StagingError, match=r"SIM_PIN=sapien==9\.9\.9 cannot be satisfied from wheelhouse .*wheels"
    ):
        install_pin(small_venv, "sapien==9.9.9", wheelhouse)
    with pytest.raises(StagingError, match="expected 'package==version"):
        install_pin(small_venv, "sapien>=3", wheelhouse)
