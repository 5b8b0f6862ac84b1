"""The shipped reference checkpoint: it loads and serves offline, and a broken one is refused up front.

A missing or corrupt checkpoint file must be one clear error naming the file, from the model server
before it listens (so before any episode), and a pool over it records nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness.wire.client import PolicyClient
from support.referencekit import EARLY, SHIPPED
from support.wirekit import REPO, SPEC, obs, start_server_process, stop_process


def test_shipped_checkpoints_are_small_and_complete() -> None:
    for ckpt in (SHIPPED, EARLY):
        names = {p.name for p in ckpt.iterdir()}
        need = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md",
                "data_card.json"}  # fmt: skip
        assert need <= names, f"{ckpt}: missing {need - names}"
        assert sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file()) <= 20 * 2**20
    config = json.loads((SHIPPED / "config.json").read_text())
    assert (config["model_type"], config["action_dim"], config["num_actions"]) == ("reference_vla", 10, 30)
    assert set(config["norm_stats"]) == {
        f"{n}_{s}" for n in ("proprio", "goal", "action") for s in ("mean", "std")
    }


def test_shipped_checkpoint_serves_seeded_chunks(tmp_path: Path, model_py: str) -> None:
    ready = tmp_path / "ready.json"
    args = ["--policy", "reference", "--ckpt", str(SHIPPED), "--set", "noise_std=0.01"]
    proc = start_server_process(model_py, ready, args, tmp_path / "server.log", env={"HF_HUB_OFFLINE": "1"})
    image = np.random.default_rng(0).integers(0, 255, (224, 224, 3), dtype=np.uint8)
    try:
        with PolicyClient.from_ready_file(ready, timeout_s=120, io_timeout_s=60, codec="msgpack") as c:
            spec = c.hello(SPEC)
            assert (spec["policy"], spec["ckpt"], spec["chunk_len"]) == ("reference", "reference", 30)
            runs = []
            for seed in (1, 1, 2):
                c.reset(
                    "PushCube",
                    "table_clean",
                    "push the blue cube forward onto the red and white target",
                    seed,
                )
                runs.append(c.infer({**obs(0.1), "images": {"base_camera": image}}, 7))
    finally:
        code = stop_process(proc)
    assert code == 0, (tmp_path / "server.log").read_text()
    assert runs[0].shape == (30, 10) and np.all(np.isfinite(runs[0]))
    np.testing.assert_array_equal(runs[0], runs[1])  # same (seed, step): same noise draw
    assert not np.array_equal(runs[0], runs[2])


def _truncate_weights(ckpt: Path) -> Path:
    path = ckpt / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _drop_tokenizer(ckpt: Path) -> Path:
    (ckpt / "tokenizer.json").unlink()
    return ckpt / "tokenizer.json"


def _wrong_action_dim(ckpt: Path) -> Path:
    path = ckpt / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "action_dim": 7}))
    return path


BREAKS: list[tuple[str, Callable[[Path], Path], str]] = [
    ("truncated safetensors", _truncate_weights, "corrupt or truncated safetensors"),
    ("missing tokenizer", _drop_tokenizer, "missing"),
    ("wrong action_dim", _wrong_action_dim, "action_dim is 7, the policy needs 10"),
]


@pytest.mark.parametrize(("what", "breaks", "says"), BREAKS, ids=[b[0] for b in BREAKS])
def test_broken_checkpoint_is_refused_naming_the_file(
    tmp_path: Path, model_py: str, ckpt_copy: Path, what: str, breaks: Callable[[Path], Path], says: str
) -> None:
    file = breaks(ckpt_copy)
    cmd = [model_py, str(REPO / "scripts" / "policy_model_server.py"), "--policy", "reference",
           "--ckpt", str(ckpt_copy), "--ready-file", str(tmp_path / "ready.json")]  # fmt: skip
    env = {"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, f"{what}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert str(file) in proc.stderr and says in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "ready.json").exists()  # never listened: no sim client could connect
