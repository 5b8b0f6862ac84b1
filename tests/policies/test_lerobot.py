"""POLICY=lerobot: a LeRobot checkpoint served by our model server in the LeRobot env (LEROBOT_PY).

A tiny randomly initialised ACT checkpoint (tests/support/lerobot_tiny_act.py, saved as lerobot-train
saves one) is served: its chunks are LeRobot's own select_action's
(tests/support/lerobot_serve_check.py), alone and batched; a short MetaWorld pool runs it through the
real worker, whose model server starts on LEROBOT_PY; and each checkpoint or feature map that
cannot be served is refused when the run is created, one line naming it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.config.rundir import RunDir
from harness.episode.records import read_tree
from support.poolkit import REPO, debug_worker

LEROBOT_PY = os.environ.get("LEROBOT_PY") or str(REPO / "envs" / "lerobot" / "bin" / "python")
SUPPORT = REPO / "tests" / "support"
pytestmark = pytest.mark.skipif(not Path(LEROBOT_PY).exists(), reason="no LeRobot env (scripts/setup.sh)")
PARAMS = "{cameras: [corner2], image_size: 96, max_steps: 12}"


def _lerobot(*argv: str, timeout: int = 300) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO), EVAL_ROOT=str(REPO))
    result = subprocess.run(
        [LEROBOT_PY, *argv], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lerobot") / "tiny-act"
    _lerobot(str(SUPPORT / "lerobot_tiny_act.py"), str(out))
    return out


def test_served_chunks_are_lerobots_own_select_action(tiny: Path) -> None:
    found = json.loads(_lerobot(str(SUPPORT / "lerobot_serve_check.py"), str(tiny)).strip().splitlines()[-1])
    assert found["spec"] == {"chunk_len": 4, "action_dim": 4, "action": ["metaworld"]}  # from the checkpoint
    assert found["shape"] == [4, 4]
    assert found["single_max_diff"] == 0.0  # one session: exactly what lerobot-eval's rollout plays
    assert found["batched_max_diff"] < 1e-5  # two sessions in one call: the same up to float sums


def test_a_metaworld_pool_serves_a_lerobot_checkpoint_from_the_lerobot_env(
    tmp_path: Path, tiny: Path
) -> None:
    argv, env = debug_worker(
        tmp_path, "lr", "metaworld drawer-close-v3\n",
        BENCHMARK="metaworld", BENCH_CONFIG="MT10", BENCH_PARAMS=PARAMS, POLICY="lerobot",
        CKPT_NAME=str(tiny), USE_EVAL_SEEDS="0", EVAL_TEST_NUM="2", RECORD_VIDEO="0",
    )  # fmt: skip
    env.pop("ACTION_CONVENTION", None)
    env["LEROBOT_PY"] = LEROBOT_PY
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = RunDir(tmp_path / "lr")
    records = sorted(read_tree(run.results).records.values(), key=lambda r: r["seed"])
    assert [(r["task"], r["seed"], r["error"]) for r in records] == [
        ("drawer-close-v3", 0, None), ("drawer-close-v3", 1, None),
    ]  # fmt: skip
    for record in records:  # a random policy: it ran its steps, whatever it reached
        assert record["policy"] == "lerobot" and record["ckpt"] == "tiny-act"
        assert 0 < record["steps"] <= 12
    # the model side of the node's fingerprint: the server ran on LeRobot's pinned torch, not the model env's
    print_ = json.loads((run.root / "fingerprints" / f"{records[0]['fingerprint']}.json").read_text())
    assert print_["model_side"]["torch"].startswith("2.10."), print_["model_side"]


def _new_run(tmp_path: Path, ckpt: Path, **knobs: str) -> subprocess.CompletedProcess:
    (tmp_path / "queue.txt").write_text("metaworld drawer-close-v3\n")
    env = dict(
        os.environ, PYTHONPATH=str(REPO), EVAL_ROOT=str(REPO), BUNDLE=str(REPO), RUNS_ROOT=str(tmp_path)
    )
    env.pop("ACTION_CONVENTION", None)
    env.update(BENCHMARK="metaworld", BENCH_CONFIG="MT10", POLICY="lerobot", CKPT_NAME=str(ckpt))
    env.update({"USE_EVAL_SEEDS": "0", "EVAL_TEST_NUM": "2", "BENCH_PARAMS": PARAMS, **knobs})
    return subprocess.run(
        [os.environ.get("SIM_PY", "python"), str(REPO / "scripts" / "new_run.py"), "r", "--queue",
         str(tmp_path / "queue.txt")],
        env=env, capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip


def _broken(tmp_path: Path, tiny: Path, how: str) -> tuple[Path, dict[str, str]]:
    """A copy of the tiny checkpoint broken one way (weights linked, not copied), and the knobs."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for item in tiny.iterdir():
        (ckpt / item.name).symlink_to(item) if item.suffix == ".safetensors" else shutil.copy(item, ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    knobs: dict[str, str] = {}
    if how == "no config":
        (ckpt / "config.json").unlink()
    elif how == "no weights":
        (ckpt / "model.safetensors").unlink()
    elif how == "diffusion":
        config.update(type="diffusion", n_obs_steps=2)
    elif how == "environment state":
        config["input_features"]["observation.environment_state"] = {"type": "ENV", "shape": [39]}
    elif how == "camera":
        (tmp_path / "map.yml").write_text("observation.image: images/topview\nobservation.state: proprio\n")
        knobs["POLICY_ARGS"] = f"feature_map={tmp_path / 'map.yml'}"
    (ckpt / "config.json").exists() and (ckpt / "config.json").write_text(json.dumps(config))
    return ckpt, knobs


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("no config", r"CKPT_NAME=.*lacks config\.json"),
        ("no weights", r"CKPT_NAME=.*lacks model\.safetensors"),
        ("diffusion", r"policy type 'diffusion' is not served \(served: act, "),
        ("environment state", r"input feature\(s\) \['observation\.environment_state'\] have no source"),
        (
            "camera",
            r"reads camera 'topview', which the benchmark does not render \(its cameras: \['corner2'\]\)",
        ),
    ],
)
def test_a_checkpoint_that_cannot_be_served_is_refused_when_the_run_is_created(
    tmp_path: Path, tiny: Path, how: str, message: str
) -> None:
    ckpt, knobs = _broken(tmp_path, tiny, how)
    result = _new_run(tmp_path, ckpt, **knobs)
    assert result.returncode == 2, result.stdout + result.stderr
    assert re.search(message, result.stderr), result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "r").exists()


def test_a_servable_checkpoint_makes_a_run(tmp_path: Path, tiny: Path) -> None:
    created = _new_run(tmp_path, tiny)
    assert created.returncode == 0, created.stderr
