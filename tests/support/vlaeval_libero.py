"""LIBERO episodes run two ways: by vla-eval's own runner (`vla-eval run`, its orchestrator and its
`LIBEROBenchmark`, via `harness.episode.bench.libero_vlaeval`) against our model server speaking
vla-eval's protocol (MODEL_SERVER_PROTOCOL=vlaeval), and by our pool (BENCHMARK=libero). What the
per-episode cross-check (tests/episode/test_libero_crosscheck.py) and benchmarks/libero_vs_vlaeval.py
share: starting each side, and reading each side's outcome per (task, init state).

Both sides get the same settings: the suite, the tasks, init states 0..N-1, the step limit, the
oracle's privileged state; settle steps (10), image flip and gripper discretisation are each
side's own code, and the same by construction (harness.episode.bench.libero_suite). Images differ
only in what is rendered: vla-eval renders agentview and the wrist camera at 256 px, ours
agentview alone; no rendering changes the physics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from harness.config.rundir import RunDir
from harness.episode.records import read_tree
from harness.wire.readyfile import read_ready
from support.poolkit import REPO, debug_worker, wait_for
from support.wirekit import model_python, start_server_process

SUITE = "libero_object"
BENCHMARK_CLASS = "harness.episode.bench.libero_vlaeval:PrivilegedLIBEROBenchmark"
POLICY = "libero_oracle"
Outcomes = dict[tuple[str, int], tuple[bool, int]]  # (task, init state) -> (success, steps)


def render_env() -> dict[str, str]:
    """Software EGL for both sides (vla-eval's `render: gpu` leaves MUJOCO_GL to the environment)."""
    return {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}


def start_vlaeval_server(workdir: Path, policy_args: str) -> tuple[subprocess.Popen, str]:
    """Our model server (model env) serving the oracle to vla-eval clients: (process, ws:// url)."""
    python = model_python()
    assert python, "envs/model is missing"
    ready, log = workdir / "server.ready", workdir / "server.log"
    env = {"MODEL_SERVER_PROTOCOL": "vlaeval", "POLICY_ARGS": policy_args}
    proc = start_server_process(python, ready, ["--policy", POLICY], log, env)
    wait_for(lambda: ready.exists() or proc.poll() is not None, 300, f"the ready file {ready}")
    assert proc.poll() is None, log.read_text()[-3000:]
    info = read_ready(ready)
    return proc, f"ws://{info['host']}:{info['port']}"


def vlaeval_config(url: str, tasks: list[str], init_states: int, max_steps: int, out: Path) -> Path:
    """A `vla-eval run` config: the tasks' init states 0..init_states-1, the oracle's privileged
    state on, our step limit; written under `out`."""
    config = {
        "server": {"url": url, "timeout": 300},
        "output_dir": str(out),
        "benchmarks": [{
            "benchmark": BENCHMARK_CLASS, "episodes_per_task": init_states, "max_steps": max_steps,
            "tasks": tasks, "params": {"suite": SUITE, "seed": 7, "send_privileged_state": True},
        }],
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    path = out / "vla-eval.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start_vlaeval_run(
    config: Path, log: Path, shard: tuple[int, int] | None = None, eval_id: str = ""
) -> subprocess.Popen:
    """`vla-eval run --no-docker` of `config` (one shard of `shard` = (id, count) when given)."""
    argv = [str(Path(sys.executable).with_name("vla-eval")), "run", "--no-docker", "-c", str(config)]
    if shard is not None:
        argv += ["--shard-id", str(shard[0]), "--num-shards", str(shard[1]), "--eval-id", eval_id]
    env = {**os.environ, **render_env(), "PYTHONPATH": str(REPO)}
    return subprocess.Popen(argv, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=config.parent)


def export_vlaeval(out: Path, eval_id: str) -> None:
    """`vla-eval export` of a sharded run's recording (a single-shard run exports itself)."""
    db = out / f"recording-{eval_id}.sqlite"
    argv = [str(Path(sys.executable).with_name("vla-eval")), "export", str(db)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def vlaeval_outcomes(out: Path) -> Outcomes:
    """Per (task, init state) the success and steps vla-eval's aggregate file records; an episode
    vla-eval counted as errored is an AssertionError naming it (not a trial on either side)."""
    (aggregate,) = out.glob("*_aggregate.json")
    outcomes: Outcomes = {}
    for task in json.loads(aggregate.read_text())["tasks"]:
        for ep in task["episodes"]:
            where = f"vla-eval {task['task']!r} init state {ep.get('episode_idx')}"
            assert not ep.get("failure_reason"), f"{where} errored: {ep.get('failure_detail', '')[-1500:]}"
            key = (task["task"], int(ep["episode_idx"]))
            outcomes[key] = (bool(ep["metrics"]["success"]), int(ep["steps"]))
    return outcomes


def pool_argv(workdir: Path, run: str, tasks: list[str], init_states: int, max_steps: int, policy_args: str
              ) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """The debug launcher (the real worker, model server and sim client in one worker) over the
    tasks' init states 0..init_states-1, BENCHMARK=libero with the same step limit."""
    queue = "".join(f"libero {task}\n" for task in tasks)
    params = json.dumps({"privileged_state": True, "max_steps": max_steps})
    argv, env = debug_worker(
        workdir, run, queue, BENCHMARK="libero", BENCH_CONFIG=SUITE, BENCH_PARAMS=params, POLICY=POLICY,
        POLICY_ARGS=policy_args, USE_EVAL_SEEDS="0", EVAL_TEST_NUM=str(init_states), RECORD_VIDEO="0",
        **render_env(),
    )  # fmt: skip
    env.pop("ACTION_CONVENTION", None)
    return argv, env


def pool_outcomes(run_dir: Path) -> Outcomes:
    """Per (task, init state) the success and steps of our records; an errored one names itself."""
    outcomes: Outcomes = {}
    for record in read_tree(RunDir(run_dir).results).records.values():
        where = f"ours {record['task']!r} init state {record['seed']}"
        assert record["error"] is None, f"{where} errored: {record['error']}"
        outcomes[(record["task"], int(record["seed"]))] = (bool(record["success"]), int(record["steps"]))
    return outcomes
