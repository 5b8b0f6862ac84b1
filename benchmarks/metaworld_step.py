"""What a MetaWorld episode costs on the CPU: an env step, one rendered frame, and the share of an
episode spent outside env steps and the policy.

In a fresh process per image size (MuJoCo binds its GL backend at import; EGL, Mesa's software
rasterizer on a CPU), BENCHMARK=metaworld builds `push-v3` (MT10), times `--steps` env steps
(zero motion: MetaWorld's physics, 5 substeps a step, no render) and `--frames` renders of the
`corner2` camera on their own. Then `--episodes` oracle episodes (MetaWorld's scripted policies,
policy/metaworld_oracle, closed loop: one action a query, EXEC_ACTIONS=1) run through the real sim
client against a real model server, with `corner2` rendered at `--size` px every step as a
pixel policy would get it (`--size 0`: no camera, the state-only oracle's own run): the
simulator's work (env steps and the frames) and the policy (the same call timed in this process)
are counted, and the rest (each episode's reset, observation packing, the wire round trip,
records) is "outside". The env build is timed apart and left out of `outside_pct`: a sim process
builds a task's env once and keeps it for the task's next seeds.

Last line: `step_ms=<env step> render_ms=<one --size px frame> outside_pct=<outside / episode wall,
env build left out> sim_pct=<env steps + frames> ok=<episodes solved> episodes=<n>`.

Example:
  $SIM_PY benchmarks/metaworld_step.py --steps 200 --frames 20 --episodes 4 --size 480
"""

from __future__ import annotations

import argparse
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

TASK = "push-v3"
CONFIG = "MT10"


def measure_step(size: int, steps: int, frames: int) -> dict[str, float]:
    """ms per env step and per corner2 frame, in this (fresh) process."""
    os.environ.update(BENCH_CONFIG=CONFIG, BENCH_PARAMS=json.dumps({"image_size": size}))
    os.environ.pop("ACTION_CONVENTION", None)
    import numpy as np

    from harness.config.settings import Settings
    from harness.episode.bench.metaworld import MetaWorldBenchmark

    bench = MetaWorldBenchmark(Settings.from_env(os.environ))
    t = time.perf_counter()
    episode = bench.make_episode(TASK, CONFIG, 0)
    build = time.perf_counter() - t
    zero = np.array([0.0, 0.0, 0.0, -1.0], np.float32)
    t = time.perf_counter()
    for _ in range(steps):
        episode.apply(zero)
    step_ms = 1000 * (time.perf_counter() - t) / steps
    bench.render("corner2")  # the renderer's GL context, made once per task: not a frame's cost
    t = time.perf_counter()
    for _ in range(frames):
        bench.render("corner2")
    render_ms = 1000 * (time.perf_counter() - t) / frames
    bench.close_env()
    return {"build_s": build, "step_ms": step_ms, "render_ms": render_ms}


def measure_outside(episodes: int, size: int) -> dict[str, float]:
    """Oracle episodes through the real sim client and model server, one action a query."""
    params = {"privileged_state": True, "cameras": ["corner2"] if size else [], "image_size": size or 480}
    os.environ.update(
        BENCHMARK="metaworld", BENCH_CONFIG=CONFIG, BENCH_PARAMS=json.dumps(params),
        POLICY="metaworld_oracle", EXEC_ACTIONS="1", RECORD_VIDEO="0",
        EVAL_ROOT=str(ROOT), PYTHONPATH=str(ROOT),
    )  # fmt: skip
    os.environ.pop("ACTION_CONVENTION", None)
    from harness.config.settings import Settings
    from harness.episode.bench import load_benchmark
    from harness.episode.simclient import SimAssignment, SimClient
    from harness.model.policyload import load_policy
    from harness.wire.client import PolicyClient
    from harness.worker.model_server_process import ModelServerProcess

    clock = {"sim": 0.0, "policy": 0.0, "setup": 0.0, "build": 0.0}
    settings = Settings.from_env(os.environ)
    bench = load_benchmark("metaworld", settings)
    policy = load_policy("metaworld_oracle", "", [])
    real_make, real_env_for, real_render = bench.make_episode, bench.env_for, bench.render

    def timed(key: str, call: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                clock[key] += time.perf_counter() - t

        return wrapped

    bench.env_for = timed("build", real_env_for)  # once per task per sim process (inside "setup")
    bench.render = timed("sim", real_render)

    def make_episode(*args: Any, **kwargs: Any) -> Any:
        episode = timed("setup", real_make)(*args, **kwargs)
        episode.apply = timed("sim", episode.apply)
        return episode

    bench.make_episode = make_episode
    with tempfile.TemporaryDirectory() as tmp:
        server = ModelServerProcess(Path(tmp) / "ready", Path(tmp) / "server.log", dict(os.environ), settings)
        try:
            server.ensure(timeout_s=300)
            with PolicyClient.from_ready_file(server.ready_file) as client:
                local = LocalTimer(client, policy, clock)
                assignment = SimAssignment(
                    Path(tmp) / "run", "metaworld", TASK, list(range(episodes)), "bench"
                )
                t = time.perf_counter()
                records = SimClient(bench, local, assignment, settings).run(
                    report=lambda s: print(s, file=sys.stderr)
                )
                wall = time.perf_counter() - t
        finally:
            server.stop()
            bench.close_env()
    episodes_wall = wall - clock["build"]  # the episodes' own time: the kept env's build left out
    outside = episodes_wall - clock["sim"] - clock["policy"]
    return {
        "wall_s": wall, "steps": sum(r["steps"] for r in records), "ok": sum(r["success"] for r in records),
        "outside_pct": 100 * outside / episodes_wall, "sim_pct": 100 * clock["sim"] / episodes_wall,
        "policy_pct": 100 * clock["policy"] / episodes_wall,
        "setup_pct": 100 * (clock["setup"] - clock["build"]) / episodes_wall, "build_s": clock["build"],
    }  # fmt: skip


class LocalTimer:
    """The policy client, with the same policy call timed in this process (policy compute)."""

    def __init__(self, client: Any, policy: Any, clock: dict[str, float]) -> None:
        self.client, self.policy, self.clock, self.episode = client, policy, clock, {}

    def hello(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self.client.hello(spec)

    def reset(self, task: str, task_config: str, instruction: str, seed: int) -> None:
        self.episode = {"task": task, "task_config": task_config, "seed": seed}
        self.policy.reset()
        self.client.reset(task, task_config, instruction, seed)

    def infer(self, obs: dict[str, Any], step: int) -> Any:
        t = time.perf_counter()
        self.policy.act(dict(obs, episode=dict(self.episode, step=step)), self.episode["seed"], step)
        self.clock["policy"] += time.perf_counter() - t
        return self.client.infer(obs, step)


def child(args: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"metaworld_step: child {args} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200, help="env steps timed (default 200)")
    p.add_argument("--frames", type=int, default=20, help="frames rendered (default 20)")
    p.add_argument("--episodes", type=int, default=4, help="oracle episodes, outside share (default 4)")
    p.add_argument("--size", type=int, default=480, help="corner2 px in the episodes; 0: none (default 480)")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        values = list(map(int, rest))
        print(json.dumps(measure_outside(*values) if kind == "outside" else measure_step(*values)))
        return 0
    if min(args.steps, args.frames, args.episodes) < 1 or args.size < 0:
        p.error("--steps, --frames and --episodes must be >= 1, --size >= 0")
    size = args.size or 480
    got = child(["step", str(size), str(args.steps), str(args.frames)])
    print(f"egl {size:>4} px: env step {got['step_ms']:6.2f} ms, a corner2 frame {got['render_ms']:.1f} ms "
          f"(env build {got['build_s']:.2f} s)", flush=True)  # fmt: skip
    out = child(["outside", str(args.episodes), str(args.size)])
    camera = f"corner2 at {args.size} px" if args.size else "no camera"
    print(f"oracle, {camera}, EXEC_ACTIONS=1: {out['ok']}/{args.episodes} solved, {out['steps']} steps, "
          f"{out['wall_s']:.1f} s wall (env build {out['build_s']:.2f} s once, left out); env steps + frames "
          f"{out['sim_pct']:.1f}%, policy {out['policy_pct']:.1f}%, outside {out['outside_pct']:.1f}% "
          f"(episode set-up {out['setup_pct']:.1f}%)")  # fmt: skip
    print(
        f"step_ms={got['step_ms']:.2f} render_ms={got['render_ms']:.1f} outside_pct={out['outside_pct']:.1f} "
        f"sim_pct={out['sim_pct']:.1f} ok={out['ok']} episodes={args.episodes}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
