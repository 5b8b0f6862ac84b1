"""The reference policy through the local pool: a broken checkpoint records nothing; a real run repeats.

The determinism test is the issue's integrity check: the same run twice (same contract, CPU, real
ManiSkill3, noise_std > 0 so the server's per-(seed, step) RNG seeding is exercised) gives identical
per-episode success and step counts for 2 tasks x 3 seeds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.referencekit import BANK, SHIPPED
from support.wirekit import REPO


def pool_env(tmp: Path, **extra: str) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "ENVS_ROOT", "SIM_PY", "MODEL_PY")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        BUNDLE=str(tmp), RUNS_ROOT=str(tmp / "runs"), POLICY="reference", NODE_CACHE=str(tmp / "cache"),
        EVAL_ROOT=str(REPO), PYTHONPATH=str(REPO), RECORD_VIDEO="0", CPU_WORKERS="1", HF_HUB_OFFLINE="1",
    )  # fmt: skip
    env.update(extra)
    return env


def run_pool(env: dict[str, str], queue: Path) -> subprocess.CompletedProcess:
    sim_py = env.get("SIM_PY", str(REPO / "envs" / "sim" / "bin" / "python"))
    cmd = [sim_py, str(REPO / "scripts" / "new_run.py"), env["STUDY_RUN"], "--queue", str(queue)]
    made = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert made.returncode == 0, made.stderr
    return subprocess.run(["bash", str(REPO / "scripts" / "run_local.sh"), "1"], env=env, capture_output=True,
                          text=True, timeout=900, cwd=REPO)  # fmt: skip


def metrics(run: Path) -> list[dict]:
    return [
        json.loads(line) for f in sorted(run.rglob("_metrics*.jsonl")) for line in f.read_text().splitlines()
    ]


def test_a_truncated_checkpoint_is_refused_before_the_run_is_created(tmp_path: Path) -> None:
    """Run creation reads the safetensors header against the file's size (no torch): a truncated
    checkpoint is one line naming the file, exit 2, and no run dir is written, so no pool ever
    starts a model server on it."""
    (tmp_path / "bank" / "t1").mkdir(parents=True)
    (tmp_path / "bank" / "t1" / "s1_clean.txt").write_text("0 1")
    (tmp_path / "queue.txt").write_text("s1 t1\n")
    shutil.copytree(SHIPPED, tmp_path / "checkpoints" / "bad")
    weights = tmp_path / "checkpoints" / "bad" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    env = pool_env(
        tmp_path, STUDY_RUN="r", CKPT_NAME="bad", BENCHMARK="tests.support.fastbench:FastBench",
        SEEDS_ROOT="bank", EVAL_TEST_NUM="2", FASTBENCH_STEPS="2", FASTBENCH_STEP_MS="2",
    )  # fmt: skip
    sim_py = env.get("SIM_PY", str(REPO / "envs" / "sim" / "bin" / "python"))
    cmd = [sim_py, str(REPO / "scripts" / "new_run.py"), "r", "--queue", str(tmp_path / "queue.txt")]
    made = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert made.returncode == 2, made.stdout + made.stderr
    assert f"{weights}: truncated or corrupt safetensors file" in made.stderr
    assert "Traceback" not in made.stdout + made.stderr
    assert not (tmp_path / "runs" / "r" / "run.yaml").exists()


@pytest.mark.sim
def test_the_same_run_twice_gives_the_same_episodes(tmp_path: Path) -> None:
    shutil.copytree(SHIPPED, tmp_path / "checkpoints" / "reference")
    (tmp_path / "seeds").symlink_to(BANK.parent)
    (tmp_path / "queue.txt").write_text("table PushCube\ntable PullCube\n")
    outcomes = []
    for name in ("first", "second"):
        env = pool_env(tmp_path, STUDY_RUN=name, CKPT_NAME="reference", EVAL_TEST_NUM="3",
                       POLICY_ARGS="noise_std=0.02")  # fmt: skip
        done = run_pool(env, tmp_path / "queue.txt")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        records = metrics(tmp_path / "runs" / name)
        assert len(records) == 6 and all(r["error"] is None for r in records), records
        outcomes.append(
            sorted((r["task"], r["seed"], r["success"], r["hard_success"], r["steps"]) for r in records)
        )
    assert outcomes[0] == outcomes[1]
