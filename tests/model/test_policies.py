"""The policy wrappers (hold, replay, hf) and the model server process (CLI, SIGTERM)."""

from __future__ import annotations

import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from harness.model.policyload import PolicyRefused, load_policy
from harness.model.seeding import rng_seed
from harness.model.wrapper import parse_override
from harness.wire.errors import RemoteError
from support.wirekit import (
    REPO,
    SPEC,
    client,
    model_python,
    obs,
    running_server,
    start_server_process,
    stop_process,
    wait_for,
)


def _held(policy: object, proprio: np.ndarray, action: str, action_dim: int) -> np.ndarray:
    return policy.act({"proprio": proprio, "episode": {"action": action, "action_dim": action_dim}}, 0, 0)


LIBERO = "vla-eval:position=delta_xyz/3,rotation=axis_angle/3,gripper=binary_close_positive/1"


def test_hold_stays_put_in_whichever_convention_the_sim_applies() -> None:
    """The floor for every benchmark (issue 63: LIBERO had none): absolute conventions repeat the
    pose, delta ones move by zero with the gripper kept (ManiSkill) or open (vla-eval's binary)."""
    policy = load_policy("hold", "", ["num_actions=5"])
    assert "action_dim" not in policy.spec and policy.spec["action"] == "any"
    pose = np.arange(20, dtype=np.float32)
    np.testing.assert_array_equal(_held(policy, pose, "ee6d", 20), np.tile(pose, (5, 1)))  # two arms
    with pytest.raises(ValueError, match="proprio has 10 numbers"):
        _held(policy, pose[:10], "ee6d", 20)
    tcp = np.array([0.1, 0.2, 0.3, 0.0, 0.5, 0.0, -1.0], np.float32)  # xyz, XYZ Euler, gripper closed
    np.testing.assert_array_equal(_held(policy, tcp, "ee_delta", 7)[0], [0, 0, 0, 0, 0, 0, -1])
    np.testing.assert_array_equal(_held(policy, np.ones(4, np.float32), "metaworld", 4)[0], [0, 0, 0, -1])
    libero = _held(policy, np.ones(8, np.float32), LIBERO, 7)
    np.testing.assert_array_equal(libero, np.tile([0, 0, 0, 0, 0, 0, -1], (5, 1)))
    with pytest.raises(ValueError, match="cannot hold still in action convention 'vla-eval:position=abs"):
        _held(policy, pose, "vla-eval:position=absolute_xyz/3,gripper=binary_close_positive/1", 4)


def test_a_policy_of_any_convention_passes_the_hello_and_others_are_still_checked() -> None:
    from harness.wire.errors import WireError
    from harness.wire.protocol import check_specs

    check_specs({"action": "any", "chunk_len": 30}, {"action": LIBERO, "action_dim": 7})
    with pytest.raises(WireError, match="action convention"):
        check_specs({"action": ["ee6d"], "action_dim": 10}, {"action": LIBERO, "action_dim": 7})


def write_traces(root: Path) -> dict[str, np.ndarray]:
    traces = {f"seed{s}": np.arange(5 * 10, dtype=np.float32).reshape(5, 10) + 100 * s for s in (3, 4)}
    (root / "pick").mkdir(parents=True)
    np.savez(root / "pick" / "cfg.traces.npz", **traces)
    return traces


def test_replay_chunks_and_padding(tmp_path: Path) -> None:
    traces = write_traces(tmp_path / "bank")
    over = [f"seeds_root={tmp_path / 'bank'}", "num_actions=3"]
    with running_server(tmp_path, "replay", over), client(tmp_path / "ready.json") as c:
        c.hello(SPEC)
        c.reset("pick", "cfg", "pick it", 4)
        np.testing.assert_array_equal(c.infer(obs(), 0), traces["seed4"][0:3])
        np.testing.assert_array_equal(c.infer(obs(), 3), traces["seed4"][[3, 4, 4]])
        c.reset("pick", "cfg", "pick it", 9)
        with pytest.raises(RemoteError, match=r"no trace for \(task='pick', task_config='cfg', seed=9\)"):
            c.infer(obs(), 0)
        c.reset("place", "cfg", "x", 3)
        with pytest.raises(RemoteError, match="no traces for task 'place'"):
            c.infer(obs(), 0)


def test_replay_uses_seeds_root_knob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    traces = write_traces(tmp_path / "bank")
    monkeypatch.setenv("SEEDS_ROOT", str(tmp_path / "bank"))
    policy = load_policy("replay")
    episode = {"task": "pick", "task_config": "cfg", "seed": 3, "step": 4}
    np.testing.assert_array_equal(
        policy.act({"episode": episode}, 3, 4), np.tile(traces["seed3"][4], (30, 1))
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nope",), "no deploy_policy.py"),
        (("../etc",), "no deploy_policy.py"),
        (("bad name!",), "expected a name under policy/"),
        (("hold", "/does/not/exist"), "neither a path nor a directory"),
        (("hold", "", ["action_dim=ten"]), "'action_dim' must be an integer"),
        (("hold", "", ["novalue"]), "expected key=value"),
    ],
)
def test_load_errors_name_the_input(args: tuple, message: str) -> None:
    with pytest.raises(PolicyRefused, match=message):
        load_policy(*args)


def test_a_wrapper_needing_a_missing_package_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "deploy_policy.py").write_text("import package_not_installed_here\n")
    (tmp_path / "deploy_policy.yml").write_text("action_dim: 10\nnum_actions: 30\n")
    with pytest.raises(PolicyRefused, match=r"deploy_policy.py imports 'package_not_installed_here', which"):
        load_policy(str(tmp_path))


def test_override_values_are_typed() -> None:
    assert parse_override("num_actions=20") == ("num_actions", 20)
    assert parse_override("cameras=[a, b]") == ("cameras", ["a", "b"])
    assert rng_seed("t", "c", 1, 2) == rng_seed("t", "c", 1, 2) != rng_seed("t", "c", 2, 1)
    assert rng_seed("t", "c", 1, 2) != rng_seed("u", "c", 1, 2) != rng_seed("t", "d", 1, 2)


def test_cli_help_and_bad_policy(tmp_path: Path) -> None:
    script = str(REPO / "scripts" / "policy_model_server.py")
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    assert (
        "--ready-file"
        in subprocess.run(
            [sys.executable, script, "--help"], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    bad = subprocess.run(
        [sys.executable, script, "--policy", "nope", "--ready-file", str(tmp_path / "r")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "policy 'nope'" in bad.stderr


@pytest.fixture(scope="module")
def model_py() -> str:
    exe = model_python()
    if exe is None:
        pytest.skip("MODEL_PY env not installed")
    return exe


def test_server_process_sigterm(tmp_path: Path, model_py: str) -> None:
    ready = tmp_path / "ready.json"
    proc = start_server_process(model_py, ready, ["--policy", "hold"], tmp_path / "server.log")
    try:
        with client(ready) as c:
            c.hello(SPEC)
            c.reset("t", "c", "i", 0)
            np.testing.assert_array_equal(c.infer(obs(0.5), 0), 0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, (tmp_path / "server.log").read_text()
    assert not ready.exists()


def test_native_server_runs_without_websockets(tmp_path: Path, model_py: str) -> None:
    """A GPU machine's image has torch but no websockets: the native server must not need it (only
    the openpi and vla-eval front ends do), or the GPU check cannot run there."""
    blocked = tmp_path / "blocked" / "websockets"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('websockets is not installed here')\n")
    ready, log = tmp_path / "ready.json", tmp_path / "server.log"
    env = {"PYTHONPATH": f"{blocked.parent}:{REPO}"}
    proc = start_server_process(model_py, ready, ["--policy", "hold"], log, env)
    try:
        wait_for(lambda: ready.exists() or proc.poll() is not None, timeout=120)
        assert proc.poll() is None, log.read_text()
        with client(ready) as c:
            c.hello(SPEC)
            c.reset("t", "c", "i", 0)
            np.testing.assert_array_equal(c.infer(obs(0.25), 0), 0.25)
    finally:
        stop_process(proc)


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory: pytest.TempPathFactory, model_py: str) -> Path:
    out = tmp_path_factory.mktemp("tiny_hf")
    subprocess.run(
        [model_py, str(REPO / "tests" / "support" / "build_tiny_hf.py"), str(out)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return out


def test_hf_loads_saved_tiny_model_through_server(tmp_path: Path, model_py: str, tiny_hf: Path) -> None:
    ready = tmp_path / "ready.json"
    args = ["--policy", "hf", "--ckpt", str(tiny_hf), "--set", "noise_std=0.05", "--set", "num_actions=8"]
    proc = start_server_process(model_py, ready, args, tmp_path / "server.log", env={"HF_HUB_OFFLINE": "1"})
    try:
        with client(ready) as c:
            spec = c.hello(SPEC)
            assert (spec["policy"], spec["ckpt"], spec["chunk_len"]) == ("hf", tiny_hf.name, 8)
            runs = []
            for seed in (1, 1, 2):
                c.reset("pick", "cfg", "pick up the red cube", seed)
                runs.append(c.infer(obs(0.2), 5))
    finally:
        code = stop_process(proc)
    assert code == 0, (tmp_path / "server.log").read_text()
    assert runs[0].shape == (8, 10) and np.all(np.isfinite(runs[0]))
    np.testing.assert_array_equal(runs[0], runs[1])  # same (seed, step): same sampled actions
    assert not np.array_equal(runs[0], runs[2])
    assert np.abs(runs[0] - 0.2).max() < 1.0  # offsets around the current pose


def test_hf_without_checkpoint_is_a_clear_error(tmp_path: Path, model_py: str) -> None:
    proc = subprocess.run(
        [
            model_py,
            str(REPO / "scripts" / "policy_model_server.py"),
            "--policy",
            "hf",
            "--ckpt",
            "",
            "--ready-file",
            str(tmp_path / "r"),
        ],
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and "needs a checkpoint dir" in proc.stderr


def test_hf_batched_answers_match_lone_ones(tmp_path: Path, model_py: str, tiny_hf: Path) -> None:
    """Sessions with instructions of different lengths (padding) and sampled noise, batched together."""
    ready = tmp_path / "ready.json"
    args = ["--policy", "hf", "--ckpt", str(tiny_hf), "--set", "noise_std=0.05", "--set", "num_actions=8"]
    env = {"HF_HUB_OFFLINE": "1", "MODEL_BATCH_WAIT_MS": "200"}
    proc = start_server_process(model_py, ready, args, tmp_path / "server.log", env=env)
    jobs = [(1, "pick up the red cube"), (2, "push"), (3, "push the cube to the goal"), (4, "red")]

    def run(job: tuple[int, str]) -> list[np.ndarray]:
        seed, instruction = job
        with client(ready) as c:
            c.hello(SPEC)
            c.reset("pick", "cfg", instruction, seed)
            return [c.infer(obs(0.1 * seed), step) for step in range(3)]

    try:
        alone = [run(job) for job in jobs]
        with ThreadPoolExecutor(len(jobs)) as pool:
            together = list(pool.map(run, jobs))
        with client(ready) as c:
            stats = c._call({"type": "ping", "stats": True})["stats"]
    finally:
        code = stop_process(proc)
    assert code == 0, (tmp_path / "server.log").read_text()
    assert stats["max"] > 1, stats
    for a_run, t_run in zip(alone, together, strict=True):
        for a, t in zip(a_run, t_run, strict=True):
            np.testing.assert_allclose(a, t, rtol=0, atol=1e-5)
    assert "batch stats: calls=" in (tmp_path / "server.log").read_text()
