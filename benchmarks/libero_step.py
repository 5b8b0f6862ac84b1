"""What a LIBERO episode costs on the CPU: an env step, one rendered frame, and the share of an
episode spent outside env steps and the policy.

Per MuJoCo GL backend (EGL; OSMesa when libOSMesa is installed) and image size (128, 256 px), a
fresh process builds `libero_object` task 0 (BENCHMARK=libero, agentview only), times `--steps`
env steps (zero motion: physics, control and the camera render robosuite does every step) and
`--frames` renders of one agentview frame on their own. Then `--episodes` oracle episodes (EGL,
256 px, EXEC_ACTIONS=8: the oracle's 8-action chunks, re-queried every 8 steps) run through the
real sim client against a real model server: env steps and the policy (the same call timed in
this process) are counted, the rest (every episode's reset, init state and settle steps;
observation packing, wire, records) is "outside", its set-up part shown apart. The env build is
timed on its own and left out of `outside_pct`: a sim process builds a task's env once and keeps it
for the task's next seeds and units (the env cache, claims that prefer a kept env), so it is not a
cost of an episode; `outside_with_build_pct` is the share with it, over these few episodes (an
upper bound: it shrinks with every episode the env serves). Each configuration runs in its own
process, because MuJoCo binds its GL backend at import.

Last line: `step_ms=<EGL 256 px step> render_ms=<EGL 256 px frame> outside_pct=<outside / episode wall,
env build left out> outside_with_build_pct=<the same, with the build> build_s=<env build>`.

Example:
  $SIM_PY benchmarks/libero_step.py --steps 30 --frames 20 --episodes 3
"""

from __future__ import annotations

import argparse
import ctypes.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SUITE = "libero_object"
SIZES = (128, 256)


def measure_step(renderer: str, size: int, steps: int, frames: int) -> dict[str, float]:
    """ms per env step and per agentview frame, in this (fresh) process."""
    os.environ.update(BENCH_CONFIG=SUITE, BENCH_PARAMS=json.dumps({"render": renderer, "image_size": size}))
    from harness.config.settings import Settings
    from harness.episode.bench.libero import LiberoBenchmark
    from harness.episode.bench.libero_suite import find_task

    bench = LiberoBenchmark(Settings.from_env(os.environ))
    task = bench.tasks()[0]
    t = time.perf_counter()
    episode = bench.make_episode(task, SUITE, 0)
    build = time.perf_counter() - t
    zero = [0.0] * 6 + [-1.0]
    t = time.perf_counter()
    for _ in range(steps):
        episode.apply(zero)
    step_ms = 1000 * (time.perf_counter() - t) / steps
    sim = bench.env_for(find_task(SUITE, task)).env.sim  # the episode's env, kept
    t = time.perf_counter()
    for _ in range(frames):
        sim.render(camera_name="agentview", width=size, height=size)
    render_ms = 1000 * (time.perf_counter() - t) / frames
    bench.close_env()
    return {"build_s": build, "step_ms": step_ms, "render_ms": render_ms}


def measure_outside(episodes: int) -> dict[str, float]:
    """Oracle episodes through the real sim client and model server at EXEC_ACTIONS=8."""
    os.environ.update(
        BENCHMARK="libero", BENCH_CONFIG=SUITE, BENCH_PARAMS="{privileged_state: true}",
        POLICY="libero_oracle", POLICY_ARGS="num_actions=8", EXEC_ACTIONS="8", RECORD_VIDEO="0",
        EVAL_ROOT=str(ROOT), PYTHONPATH=str(ROOT),
    )  # fmt: skip
    os.environ.pop("ACTION_CONVENTION", None)
    from harness.config.settings import Settings
    from harness.episode.bench import load_benchmark
    from harness.episode.simclient import SimAssignment, SimClient
    from harness.model.policyload import load_policy
    from harness.wire.client import PolicyClient
    from harness.worker.model_server_process import ModelServerProcess

    clock = {"step": 0.0, "policy": 0.0, "setup": 0.0, "build": 0.0}
    settings = Settings.from_env(os.environ)
    bench = load_benchmark("libero", settings)
    policy = load_policy("libero_oracle", "", ["num_actions=8"])
    real_make, real_env_for = bench.make_episode, bench.env_for

    def env_for(task: Any) -> Any:  # the env build, once per task per sim process (part of "setup")
        t = time.perf_counter()
        env = real_env_for(task)
        clock["build"] += time.perf_counter() - t
        return env

    bench.env_for = env_for

    def make_episode(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        episode = real_make(*args, **kwargs)
        clock["setup"] += time.perf_counter() - t
        real_apply = episode.apply

        def apply(action: Any) -> None:
            t = time.perf_counter()
            real_apply(action)
            clock["step"] += time.perf_counter() - t

        episode.apply = apply
        return episode

    bench.make_episode = make_episode
    with tempfile.TemporaryDirectory() as tmp:
        server = ModelServerProcess(Path(tmp) / "ready", Path(tmp) / "server.log", dict(os.environ), settings)
        try:
            server.ensure(timeout_s=300)
            with PolicyClient.from_ready_file(server.ready_file) as client:
                local = LocalTimer(client, policy, clock)
                assignment = SimAssignment(
                    Path(tmp) / "run", "libero", bench.tasks()[0], list(range(episodes)), "bench"
                )
                t = time.perf_counter()
                sim = SimClient(bench, local, assignment, settings)
                records = sim.run(report=lambda line: print(line, file=sys.stderr))
                wall = time.perf_counter() - t
        finally:
            server.stop()
            bench.close_env()
    steps = sum(r["steps"] for r in records)
    outside = wall - clock["step"] - clock["policy"]
    solved = sum(r["success"] for r in records)
    episodes_wall = wall - clock["build"]  # the episodes' own time: the kept env's build left out
    return {
        "wall_s": wall, "steps": steps, "ok": solved,
        "outside_pct": 100 * (outside - clock["build"]) / episodes_wall,
        "outside_with_build_pct": 100 * outside / wall,
        "setup_pct": 100 * (clock["setup"] - clock["build"]) / episodes_wall,
        "step_pct": 100 * clock["step"] / episodes_wall,
        "build_s": clock["build"], "episode_setup_s": (clock["setup"] - clock["build"]) / len(records),
    }  # fmt: skip


class LocalTimer:
    """The policy client, with the same policy call timed in this process (policy compute)."""

    def __init__(self, client: Any, policy: Any, clock: dict[str, float]) -> None:
        self.client, self.policy, self.clock, self.episode = client, policy, clock, {}
        self.state = policy.new_state() if hasattr(policy, "new_state") else None

    def hello(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self.client.hello(spec)

    def reset(self, task: str, task_config: str, instruction: str, seed: int) -> None:
        self.episode = {"task": task, "task_config": task_config, "seed": seed}
        self.policy.reset(self.state)
        self.client.reset(task, task_config, instruction, seed)

    def infer(self, obs: dict[str, Any], step: int) -> Any:
        t = time.perf_counter()
        local = dict(obs, episode=dict(self.episode, step=step))
        self.policy.act(local, self.episode["seed"], step, self.state)
        self.clock["policy"] += time.perf_counter() - t
        return self.client.infer(obs, step)


def child(args: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"libero_step: child {args} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30, help="env steps timed per configuration (default 30)")
    p.add_argument("--frames", type=int, default=20, help="frames rendered per configuration (default 20)")
    p.add_argument("--episodes", type=int, default=3, help="oracle episodes, outside share (default 3)")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        result = measure_outside(int(rest[0])) if kind == "outside" else measure_step(kind, *map(int, rest))
        print(json.dumps(result))
        return 0
    if min(args.steps, args.frames, args.episodes) < 1:
        p.error("--steps, --frames and --episodes must be >= 1")
    renderers = ["egl"] + (["osmesa"] if ctypes.util.find_library("OSMesa") else [])
    table = {}
    for renderer in renderers:
        for size in SIZES:
            table[renderer, size] = got = child([renderer, str(size), str(args.steps), str(args.frames)])
            print(f"{renderer:<7} {size:>4} px: env step {got['step_ms']:7.1f} ms, one frame "
                  f"{got['render_ms']:7.1f} ms (env build {got['build_s']:.1f} s)", flush=True)  # fmt: skip
    if len(renderers) == 1:
        print("osmesa: libOSMesa not installed (apt-get install libosmesa6), not measured")
    outside = child(["outside", str(args.episodes)])
    share = outside["outside_pct"]
    print(f"oracle at EXEC_ACTIONS=8: {outside['ok']}/{args.episodes} solved, {outside['steps']} steps, "
          f"{outside['wall_s']:.1f} s wall, of it the env build {outside['build_s']:.1f} s once; of the "
          f"rest, env steps {outside['step_pct']:.1f}%, outside env steps + policy {share:.1f}% "
          f"(episode set-up {outside['setup_pct']:.1f}%: {outside['episode_setup_s']:.2f} s an episode "
          f"for the reset, init state and settle steps); with the build "
          f"{outside['outside_with_build_pct']:.1f}%")  # fmt: skip
    ref = table["egl", 256]
    print(
        f"step_ms={ref['step_ms']:.1f} render_ms={ref['render_ms']:.1f} outside_pct={share:.1f} "
        f"outside_with_build_pct={outside['outside_with_build_pct']:.1f} build_s={outside['build_s']:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
