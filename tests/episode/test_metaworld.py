"""MetaWorld (BENCHMARK=metaworld, `metaworld` in the sim env) end to end: the metaworld_oracle policy
(MetaWorld's own scripted policies) solves MT10 episodes through the real worker, model server and
sim client; an episode's observation, spec, seeding and refusals in-process; and each bad input
refused when the run is created, one line naming it. No rendering but one small frame and one
short video (Mesa EGL on the CPU); about 30-60 s on a busy 2-core machine."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.config.manifest import contract_hash, load_manifest
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.bench import load_benchmark
from harness.episode.records import read_tree
from support.poolkit import REPO, debug_worker

ORACLE_PARAMS = "{privileged_state: true, cameras: [], image_size: 64}"


def _bench(monkeypatch: pytest.MonkeyPatch, params: str, config: str = "MT10") -> Any:
    monkeypatch.setenv("BENCH_PARAMS", params)
    monkeypatch.setenv("BENCH_CONFIG", config)
    monkeypatch.delenv("ACTION_CONVENTION", raising=False)
    return load_benchmark("metaworld", Settings.from_env(os.environ))


@pytest.mark.sim
def test_the_oracle_solves_mt10_tasks_through_the_real_worker(tmp_path: Path) -> None:
    argv, env = debug_worker(
        tmp_path, "mw", "metaworld reach-v3\nmetaworld push-v3\n",
        BENCHMARK="metaworld", BENCH_CONFIG="MT10", BENCH_PARAMS=ORACLE_PARAMS, POLICY="metaworld_oracle",
        USE_EVAL_SEEDS="0", EVAL_TEST_NUM="2", RECORD_VIDEO="0",
    )  # fmt: skip
    env.pop("ACTION_CONVENTION", None)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = RunDir(tmp_path / "mw")
    records = list(read_tree(run.results).records.values())
    assert sorted((r["task"], r["seed"]) for r in records) == [
        ("push-v3", 0), ("push-v3", 1), ("reach-v3", 0), ("reach-v3", 1),
    ]  # fmt: skip
    contract = contract_hash(load_manifest(run.root))
    for record in records:
        assert record["success"] is True and record["error"] is None, record
        assert record["hard_success"] is True  # no collision signal on MetaWorld: HSR = SR
        assert record["task_config"] == "metaworld_MT10" and record["contract"] == contract
        assert record["policy"] == "metaworld_oracle" and 10 < record["steps"] < 200
        assert record["sim_version"] == "metaworld==3.0.0 mujoco==3.3.2"
    assert "privileged_state: true" in run.manifest.read_text()  # the oracle's input is in the contract


@pytest.mark.sim
def test_an_episode_is_its_task_and_seed_and_refuses_bad_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench(monkeypatch, "{image_size: 32}")
    try:
        assert bench.version == "metaworld==3.0.0 mujoco==3.3.2" and len(bench.tasks()) == 10
        episode = bench.make_episode("push-v3", "MT10", 7)
        assert episode.instruction == "push" and episode.step_limit == 500 and episode.action_dim == 4
        assert episode.spec["action"] == "metaworld" and episode.spec["cameras"] == ["corner2"]
        obs = episode.observe()
        assert "privileged_state" not in obs  # off unless BENCH_PARAMS asks for it
        frame = obs["images"]["corner2"]
        assert frame.shape == (32, 32, 3) and frame.dtype == np.uint8 and frame.any()
        assert obs["proprio"].shape == (4,) and obs["state"] == {}
        with pytest.raises(ValueError, match=r"action must be 4 finite numbers"):
            episode.apply(np.full(4, np.nan))
        episode.apply(np.array([0.0, 0.0, 0.0, -1.0]))
        assert not episode.success() and not episode.collided()
        bench.make_episode("push-v3", "MT10", 7)
        puck = bench._env._get_pos_objects().copy()  # where seed 7 put the puck
        bench.make_episode("push-v3", "MT10", 3)  # another seed in between: the env is reused
        assert not np.allclose(bench._env._get_pos_objects(), puck)
        bench.make_episode("push-v3", "MT10", 7)
        assert np.array_equal(bench._env._get_pos_objects(), puck)
        expert = bench.expert("reach-v3", "MT10", 0)
        assert expert.solved and expert.actions.shape == (expert.steps, 4)
    finally:
        bench.close_env()


def test_the_oracle_reads_mujoco_free_scripted_policies_and_refuses_without_privileged_state() -> None:
    from harness.model.wrapper import import_wrapper, policy_dir

    oracle = import_wrapper(policy_dir("metaworld_oracle"))
    expected = r"no privileged_state; run MetaWorld with BENCH_PARAMS='\{privileged_state: true\}'"
    with pytest.raises(ValueError, match=expected):
        oracle.encode_obs({"images": {}, "proprio": np.zeros(4)})
    model = oracle.get_model({"action_dim": 4, "num_actions": 2})
    assert len(model.policies) == 50  # MetaWorld's scripted policy for each of its 50 tasks
    state = np.zeros(39)
    state[:3] = [0.0, 0.6, 0.2]  # hand; the goal (last 3) at the origin: reach moves toward it
    chunk = model.generate_actions(
        **oracle.encode_obs({"privileged_state": {"state": state, "task": "reach-v3"}})
    )
    assert chunk.shape == (1, 2, 4) and chunk.dtype == np.float32 and chunk[0, 0, 1] < 0
    state.flags.writeable = False  # as the wire delivers it; door-open-v3's policy writes into its views
    model.generate_actions(
        **oracle.encode_obs({"privileged_state": {"state": state, "task": "door-open-v3"}})
    )


def _new_run(tmp_path: Path, queue_line: str, **knobs: str) -> subprocess.CompletedProcess:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "queue.txt").write_text(queue_line + "\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), EVAL_ROOT=str(REPO), BUNDLE=str(REPO))
    env["RUNS_ROOT"] = str(tmp_path)
    env.pop("ACTION_CONVENTION", None)
    env.update(BENCHMARK="metaworld", BENCH_CONFIG="MT10", POLICY="metaworld_oracle", USE_EVAL_SEEDS="0")
    env.update({"EVAL_TEST_NUM": "10", "BENCH_PARAMS": ORACLE_PARAMS, **knobs})
    script = str(REPO / "scripts" / "new_run.py")
    return subprocess.run(
        [os.environ.get("SIM_PY", "python"), script, "r", "--queue", str(tmp_path / "queue.txt")],
        env=env, capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("queue_line", "knobs", "message"),
    [
        (
            "metaworld push-v3",
            {"BENCH_CONFIG": "MT20"},
            "BENCH_CONFIG='MT20': not a MetaWorld task list; expected one of MT10, MT50",
        ),
        ("metaworld push-v3", {"BENCH_CONFIG": "clean"}, "BENCH_CONFIG='clean': not a MetaWorld task list"),
        (
            "metaworld pushh-v3",
            {},
            r"task 'pushh-v3' is not in MetaWorld's MT10; its tasks: reach-v3, push-v3",
        ),
        ("metaworld assembly-v3", {}, "task 'assembly-v3' is not in MetaWorld's MT10"),  # MT50's only
        ("metaworld push-v3", {"BENCH_PARAMS": "{cameras: [wrist]}"}, r"unknown camera\(s\) \['wrist'\]"),
        ("metaworld push-v3", {"BENCH_PARAMS": "{max_steps: 600}"}, "max_steps=600: expected 0"),
        ("metaworld push-v3", {"BENCH_PARAMS": "{suite: x}"}, r"unknown MetaWorld setting\(s\) \['suite'\]"),
        ("metaworld push-v3", {"POLICY": "libero_oracle"}, r"sim applies 'metaworld'"),
        ("metaworld push-v3", {"ACTION_CONVENTION": "ee6d"}, "MetaWorld applies 'metaworld'; leave it empty"),
    ],
)
def test_bad_metaworld_inputs_are_refused_when_the_run_is_created(
    tmp_path: Path, queue_line: str, knobs: dict[str, str], message: str
) -> None:
    result = _new_run(tmp_path, queue_line, **knobs)
    assert result.returncode == 2, result.stdout + result.stderr
    assert re.search(message, result.stderr), result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "r").exists()


def test_an_mt50_task_makes_a_run(tmp_path: Path) -> None:
    created = _new_run(tmp_path, "metaworld assembly-v3", BENCH_CONFIG="MT50")
    assert created.returncode == 0, created.stderr
