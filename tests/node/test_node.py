"""harness.node.steps: the worker plan, code refresh, checkpoint staging, and SIM_PIN on the real sim env."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.config.settings import Settings
from harness.node import staging
from harness.node import steps as node
from harness.node.codesync import code_copy, sync_code
from harness.node.holds import hold
from harness.node.staging import StagingError, entries, stage, want
from support.nodecache import TEST_CACHE_MAX_GB, TEST_NODE_CACHE

ROOT = Path(__file__).resolve().parents[2]
SIM_ENV = ROOT / "envs" / "sim"
WHEELHOUSE = ROOT / "envs" / "wheelhouse"
PIN = "sapien==3.0.2 setuptools<81"


def test_plan_one_worker_per_gpu_share_workers_per_gpu_of_each_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "nX")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("WORKERS_PER_GPU", "2")
    monkeypatch.setenv("SIMS_PER_WORKER", "auto")
    assert node.worker_plan(Settings.from_env(os.environ), log=lambda _: None) == [
        ("nX-j42-w0", "0", "auto", 1),
        ("nX-j42-w1", "0", "auto", 1),
        ("nX-j42-w2", "1", "auto", 1),
        ("nX-j42-w3", "1", "auto", 1),
    ]


def test_plan_cpu_workers_without_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "local1")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("LOCAL_POOL_NODES", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("CPU_WORKERS", "3")
    monkeypatch.setenv("SIMS_PER_WORKER", "1")
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    said: list[str] = []
    plan = node.worker_plan(Settings.from_env(os.environ), log=said.append)
    assert plan == [(f"local1-w{i}", "", "1", 1) for i in range(3)]
    assert said and said[0].startswith("[node local1] sizing: 3 workers x 1 sim slot(s) each; CPU_WORKERS=3")
    monkeypatch.setenv("CPU_WORKERS", "0")
    with pytest.raises(ValueError, match="CPU_WORKERS='0'"):
        Settings.from_env(os.environ)  # refused where the node script builds its settings


def test_code_refresh_propagates_edits_and_deletions(tmp_path: Path) -> None:
    src, dst = tmp_path / "shared", tmp_path / "local"
    (src / "harness").mkdir(parents=True)
    (src / "harness" / "a.py").write_text("A = 1\n")
    (src / "harness" / "b.py").write_text("B = 1\n")
    assert sync_code(src, dst) == 2
    assert sync_code(src, dst) == 0  # unchanged: nothing copied
    (src / "harness" / "a.py").write_text("A = 22\n")
    (src / "harness" / "b.py").unlink()
    assert sync_code(src, dst) == 1
    assert (dst / "harness" / "a.py").read_text() == "A = 22\n"
    assert not (dst / "harness" / "b.py").exists()


@pytest.fixture
def node_script(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A stand-in for the node script whose lifetime the staged entries are held for."""
    script = subprocess.Popen(["sleep", "600"])
    monkeypatch.setenv("EVAL_NODE_PID", str(script.pid))
    yield script.pid
    script.kill()
    script.wait()


def test_prepare_stages_checkpoint_and_exports_node_local_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node_script: int
) -> None:
    ckpt = tmp_path / "bundle" / "checkpoints" / "my-ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "weights.bin").write_bytes(os.urandom(1000))
    monkeypatch.setenv("BUNDLE", str(tmp_path / "bundle"))
    monkeypatch.setenv("CKPT_NAME", "my-ckpt")
    monkeypatch.setenv("NODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STAGE_ENVS", "none")
    monkeypatch.setenv("EVAL_ROOT", str(ROOT))
    out = node.prepare(Settings.from_env(os.environ), log=lambda _m: None)
    assert Path(out["CKPT_DIR"]).name == "my-ckpt"  # the checkpoint keeps its name
    assert Path(out["CKPT_DIR"]).is_relative_to(tmp_path / "cache")
    assert (Path(out["CKPT_DIR"]) / "weights.bin").read_bytes() == (ckpt / "weights.bin").read_bytes()
    assert (Path(out["EVAL_ROOT"]) / "harness" / "node" / "steps.py").is_file()
    assert out["PYTHONPATH"].split(":")[0] == out["EVAL_ROOT"]


def test_the_lerobot_env_is_staged_when_stage_envs_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node_script: int
) -> None:
    """STAGE_ENVS=lerobot copies the env LEROBOT_PY names (a small venv here: the real one is 8.6 GB)
    and exports the node-local copy's Python, which runs; the other envs stay where they are."""
    venv = tmp_path / "shared" / "lerobot"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setenv("NODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STAGE_ENVS", "lerobot")
    monkeypatch.setenv("LEROBOT_PY", str(venv / "bin" / "python"))
    monkeypatch.setenv("CKPT_NAME", "")
    monkeypatch.setenv("EVAL_ROOT", str(ROOT))
    out = node.prepare(Settings.from_env(os.environ), log=lambda _m: None)
    staged = Path(out["LEROBOT_PY"])
    assert staged.is_relative_to(tmp_path / "cache") and staged.name == "python"
    ran = subprocess.run([str(staged), "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True)
    assert ran.returncode == 0 and Path(ran.stdout.strip()).is_relative_to(tmp_path / "cache"), ran
    assert out["MODEL_PY"] == os.environ["MODEL_PY"] and out["SIM_PY"] == os.environ["SIM_PY"]


def test_pin_without_staged_sim_env_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STAGE_ENVS", "model")
    monkeypatch.setenv("SIM_PIN", PIN)
    with pytest.raises(StagingError, match="needs the sim env staged"):
        node.prepare(Settings.from_env(os.environ), log=lambda _m: None)


@pytest.mark.sim
def test_sim_pin_installs_into_the_node_copy_only_and_records_see_it(
    monkeypatch: pytest.MonkeyPatch, node_script: int
) -> None:
    """Real: the sim env (sapien 3.0.3) staged with SIM_PIN=sapien==3.0.2 from the local wheelhouse."""
    if not list(WHEELHOUSE.glob("sapien-3.0.2-*.whl")):
        pytest.skip(f"no sapien 3.0.2 wheel in {WHEELHOUSE} (scripts/setup.sh fetches it)")
    monkeypatch.setenv("NODE_CACHE", str(TEST_NODE_CACHE))
    monkeypatch.setenv("CACHE_MAX_GB", TEST_CACHE_MAX_GB)
    monkeypatch.setenv("STAGE_ENVS", "sim")
    monkeypatch.setenv("SIM_PY", str(SIM_ENV / "bin" / "python"))
    monkeypatch.setenv("SIM_PIN", PIN)
    monkeypatch.setenv("WHEELHOUSE", str(WHEELHOUSE))
    monkeypatch.setenv("EVAL_ROOT", str(ROOT))
    out = node.prepare(Settings.from_env(os.environ), log=print)
    staged = Path(out["SIM_PY"])
    assert staged.is_relative_to(TEST_NODE_CACHE)
    code = (
        "import os; from harness.config.settings import Settings; "
        "from harness.episode.bench.maniskill import ManiSkillBenchmark as B; "
        "print(B(Settings.from_env(os.environ)).version)"
    )
    version = subprocess.run(
        [staged, "-c", code],
        cwd=out["EVAL_ROOT"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": out["EVAL_ROOT"]},
    )
    assert version.returncode == 0, version.stderr
    assert "sapien==3.0.2" in version.stdout  # what every record of this node carries
    shared = subprocess.run(
        [SIM_ENV / "bin" / "python", "-c", "import sapien; print(sapien.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shared.stdout.strip() == "3.0.3"  # the shared env is untouched


def test_unsatisfiable_pin_stops_the_node_naming_pin_and_wheelhouse(tmp_path: Path) -> None:
    """The node script itself, by hand: a pin the wheelhouse cannot satisfy is a node-level failure."""
    venv = tmp_path / "tinyenv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {
        **os.environ,
        "STUDY_RUN": "pinfail",
        "RUNS_ROOT": str(tmp_path / "runs"),
        "NODE_CACHE": str(tmp_path / "c"),
        "STAGE_ENVS": "sim",
        "SIM_PIN": "sapien==9.9.9",
        "WHEELHOUSE": str(tmp_path / "wheels"),
    }
    (tmp_path / "wheels").mkdir()
    env["SIM_PY"] = str(venv / "bin" / "python")
    done = subprocess.run(
        ["bash", str(ROOT / "slurm" / "eval_node.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert (
        f"SIM_PIN=sapien==9.9.9 cannot be satisfied from wheelhouse {tmp_path / 'wheels'}"
        in done.stdout + done.stderr
    )


def test_each_code_version_gets_its_own_copy_and_a_running_copy_never_changes(tmp_path: Path) -> None:
    """Issue 11, item 6: the node's code copy was keyed by path and re-synced in place at each launch,
    so a worker of an earlier launch ran files changed under it."""
    src = tmp_path / "src"
    (src / "harness").mkdir(parents=True)
    (src / "harness" / "a.py").write_text("A = 1\n")
    holder = subprocess.Popen(["sleep", "600"])
    try:
        first = code_copy(src, tmp_path / "code")
        hold([first], holder.pid)
        assert code_copy(src, tmp_path / "code") == first  # same version: reused
        (src / "harness" / "a.py").write_text("A = 2\n")
        second = code_copy(src, tmp_path / "code")
        assert second != first
        assert (first / "harness" / "a.py").read_text() == "A = 1\n"  # the running version is intact
        assert (second / "harness" / "a.py").read_text() == "A = 2\n"
    finally:
        holder.kill()
        holder.wait()


def test_staging_the_checkpoint_never_removes_the_env_this_launch_staged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node_script: int
) -> None:
    """Issue 20, item 6: on a tight node disk, making room for the checkpoint removed the sim env
    staged a minute earlier (only the entry being staged was protected; holds came after all
    staging), and prepare exported a SIM_PY that no longer existed."""
    venv = tmp_path / "shared" / "simenv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    ckpt = tmp_path / "shared" / "my-ckpt"
    ckpt.mkdir()
    (ckpt / "weights.bin").write_bytes(os.urandom(1 << 20))
    cache = tmp_path / "cache"
    older = tmp_path / "shared" / "older-ckpt"  # an earlier launch's, free to go
    older.mkdir()
    (older / "weights.bin").write_bytes(os.urandom(1 << 20))
    stage(want(cache, "ckpt", older), log=lambda _m: None)
    later = {"s": 0.0, "capacity": float(1 << 50)}

    def used_bytes() -> int:
        return sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(cache) for f in files)

    def the_env_is_staged(msg: str) -> None:
        if "staged simenv" not in msg:
            return
        later["s"] = 120.0  # copying the checkpoint starts two minutes later (a slow pin install, say)
        mtime = time.time() + 30  # the older entry was used after the env: the env is the LRU one
        [older_entry] = [e for e in entries(cache) if e.label == "older-ckpt"]
        os.utime(older_entry.root / staging.USED, (mtime, mtime))
        later["capacity"] = used_bytes() + (64 << 20) + (1 << 20) - 1  # the checkpoint needs room made

    monkeypatch.setattr(
        staging, "time", SimpleNamespace(time=lambda: time.time() + later["s"], monotonic=time.monotonic)
    )
    disk = SimpleNamespace(
        rmtree=shutil.rmtree, disk_usage=lambda _p: SimpleNamespace(free=later["capacity"] - used_bytes())
    )
    monkeypatch.setattr(staging, "shutil", disk)
    for name, value in {
        "NODE_CACHE": str(cache), "STAGE_ENVS": "sim", "SIM_PY": str(venv / "bin" / "python"), "SIM_PIN": "",
        "MODEL_PY": sys.executable, "CKPT_NAME": str(ckpt), "STAGE_BACKBONES": "", "EVAL_ROOT": str(ROOT),
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    out = node.prepare(Settings.from_env(os.environ), log=the_env_is_staged)
    assert later["s"], "the env was not staged by this launch"
    assert Path(out["SIM_PY"]).exists(), f"prepare exported a SIM_PY that is gone: {out['SIM_PY']}"
    assert (Path(out["CKPT_DIR"]) / "weights.bin").is_file()
    assert sorted(e.label for e in entries(cache)) == ["my-ckpt", "simenv"]  # room made from the older one
