"""A real vla-eval StepBenchmark in our farm: vla-eval 0.8.0's MIKASA-Robo adapter (ManiSkill3 memory
tasks, `mikasa-robo-suite` 1.0.0 installed without its pins) run by the real worker, model server and
sim client; and each bad input refused before any episode with one error naming it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from harness.config.manifest import contract_hash, load_manifest
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.bench import load_benchmark
from harness.episode.records import read_tree
from harness.model.policyload import load_policy
from harness.model.session import Session
from harness.wire import protocol
from harness.wire.errors import WireError
from support.poolkit import debug_worker

ROOT = Path(__file__).resolve().parents[2]
MIKASA = "vla-eval:vla_eval.benchmarks.mikasa:MIKASABenchmark"
TASK = "RememberColor3-v0"
PARAMS = "{tasks: [RememberColor3-v0], max_episode_steps: 6}"
CONVENTION = "vla-eval:joints=joint_delta_pos/7,gripper=raw/1"


@pytest.fixture
def mikasa_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHMARK", MIKASA)
    monkeypatch.setenv("BENCH_PARAMS", PARAMS)
    monkeypatch.delenv("ACTION_CONVENTION", raising=False)


@pytest.mark.sim
def test_replay_runs_a_mikasa_episode_through_the_real_worker_and_resumes(tmp_path: Path) -> None:
    bank = tmp_path / "bank" / TASK
    bank.mkdir(parents=True)
    trace = np.zeros((6, 8), np.float32)
    trace[:, 0] = 0.05  # a small turn of joint 1 per step (joint deltas)
    np.savez(bank / "mikasa_clean.traces.npz", seed0=trace)
    argv, env = debug_worker(
        tmp_path, "mk", f"mikasa {TASK}\n",
        BENCHMARK=MIKASA, BENCH_PARAMS=PARAMS, POLICY="replay", USE_EVAL_SEEDS="0", EVAL_TEST_NUM="1",
        SEEDS_ROOT=str(tmp_path / "bank"), POLICY_ARGS=f"action_dim=8 action_convention={CONVENTION}",
    )  # fmt: skip
    env.pop("ACTION_CONVENTION", None)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = read_tree(RunDir(tmp_path / "mk").results).records
    assert len(records) == 1
    (record,) = records.values()
    assert record["error"] is None and record["steps"] == 6 and record["success"] is False
    assert record["task"] == TASK and record["task_config"] == "mikasa_clean" and record["policy"] == "replay"
    assert record["contract"] == contract_hash(load_manifest(tmp_path / "mk"))
    assert "vla-eval==0.8.0" in record["sim_version"] and "mikasa-robo-suite==1.0.0" in record["sim_version"]
    video = RunDir(tmp_path / "mk").result_dir(TASK, "replay", "mikasa_clean", "") / record["video"]
    assert video.stat().st_size > 1000
    manifest = (tmp_path / "mk" / "run.yaml").read_text()
    assert MIKASA in manifest and "max_episode_steps: 6" in manifest  # BENCH_PARAMS is in the contract
    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert rerun.returncode == 0 and "no unit left to claim" in rerun.stderr  # resumed: nothing ran
    assert read_tree(RunDir(tmp_path / "mk").results).records == records


@pytest.mark.sim
def test_a_policy_whose_action_spec_differs_is_refused_at_hello_naming_both(mikasa_knobs: None) -> None:
    episode = load_benchmark(MIKASA, Settings.from_env(os.environ)).make_episode(TASK, "clean", 0)
    try:
        assert episode.spec["action"] == CONVENTION and episode.action_dim == 8
        replay = Session(load_policy("replay"), token=None, reply_token=None)  # 10-D ee6d
        with pytest.raises(WireError) as refused:
            replay.handle(protocol.hello(episode.spec, ["json"]))
        assert "action_dim: policy produces 10, robot takes 8" in str(refused.value)
        assert "policy emits ['ee6d']" in str(refused.value)
        assert f"sim applies '{CONVENTION}'" in str(refused.value)
        with pytest.raises(ValueError, match=r"action must be 8 finite numbers"):
            episode.apply(np.zeros(10))
    finally:
        episode.close()


@pytest.mark.sim
def test_an_episode_the_benchmark_ends_early_ends_there_without_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BENCH_PARAMS", "{tasks: [RememberColor3-v0], max_episode_steps: 40}")
    episode = load_benchmark(MIKASA, Settings.from_env(os.environ)).make_episode(TASK, "clean", 1)
    try:
        assert episode.step_limit == 40
        steps = 0
        while steps < episode.step_limit:  # the sim client's loop
            episode.apply(np.zeros(8))
            steps += 1
            assert not episode.success()
        assert steps == episode.step_limit == 25  # the env's own time limit (truncated) ended it
    finally:
        episode.close()


@pytest.mark.parametrize(
    ("benchmark", "params", "message"),
    [
        (
            "vla-eval:vla_eval.benchmarks.nowhere:Bench",
            "",
            r"cannot import 'vla_eval\.benchmarks\.nowhere:Bench'",
        ),
        (
            "vla-eval:harness.episode.bench.maniskill:ManiSkillBenchmark",
            "",
            "is not a vla-eval StepBenchmark",
        ),
        (MIKASA, "{no_such_option: 1}", r"BENCH_PARAMS='\{no_such_option: 1\}'.*rejects it: TypeError"),
        (MIKASA, "[1, 2]", "knob BENCH_PARAMS='\\[1, 2\\]': expected a YAML/JSON mapping: it is a list"),
        (MIKASA, "{tasks: [", "not YAML/JSON"),
    ],
)
def test_bad_benchmark_inputs_are_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, benchmark: str, params: str, message: str
) -> None:
    monkeypatch.setenv("BENCH_PARAMS", params)
    with pytest.raises(ValueError, match=message):
        load_benchmark(benchmark, Settings.from_env(os.environ))


def test_unknown_task_and_foreign_convention_are_refused(
    mikasa_knobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = load_benchmark(MIKASA, Settings.from_env(os.environ))
    with pytest.raises(ValueError, match=r"unknown task 'PickCube'.*RememberColor3-v0"):
        bench.check("PickCube", "clean")
    monkeypatch.setenv("ACTION_CONVENTION", "ee6d")
    with pytest.raises(ValueError, match=r"ACTION_CONVENTION='ee6d'.*applies its own action spec"):
        load_benchmark(MIKASA, Settings.from_env(os.environ))
    assert list(bench.layout.smoothed_dims(1, True)) == list(range(7))  # never the gripper
