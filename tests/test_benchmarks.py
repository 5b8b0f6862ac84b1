"""Every speed benchmark (a script under benchmarks/) starts: its imports resolve and `--help`
answers (a moved module breaks a speed benchmark silently otherwise, since nothing else runs them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=[p.stem for p in BENCHMARKS])
def test_benchmark_answers_help(script: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()


def test_gpu_check_dry_run_on_the_cpu() -> None:
    """The GPU check is run only when a session is lent a GPU machine, with minutes to spare: its
    dry run here keeps it working (the model servers start, the clients are served, the last line
    holds every figure)."""
    model_py = os.environ.get("MODEL_PY") or str(ROOT / "envs" / "model" / "bin" / "python")
    if not Path(model_py).exists():
        pytest.skip("MODEL_PY env not installed")
    env = dict(os.environ, PYTHONPATH=str(ROOT), MODEL_PY=model_py)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--seconds", "0.5"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"gpus=0 workers=\d+ sims_per_worker=\d+ ref_k1_obs_s=[\d.]+ ref_k8_obs_s=[\d.]+ "
        r"ref_k8_speedup=[\d.]+ ref_k8_mean_batch=[\d.]+ k8_vs_ideal=[\d.]+",
        last,
    ), last


def test_hostile_server_memory_prints_its_figures() -> None:
    """benchmarks/server_memory.py --hostile, one client: every shape refused, the last line's figures."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "server_memory.py"), "--hostile", "--clients", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.strip().splitlines()
    assert sum("holds more than 100000 items" in line for line in lines) == 3, done.stdout
    assert re.fullmatch(r"worst_peak_ratio=[\d.]+ worst_wait_s=[\d.]+", lines[-1]), lines[-1]
