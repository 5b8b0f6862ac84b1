"""Where an episode's wall time goes: sim step, rendering, policy compute, wire, everything else.

Runs K episodes end to end through the real sim client loop against a real model server process,
with timers around the simulator (env.step, split into rendering = scene update + sensor capture +
readback, and physics/control = the rest; episode setup = make + reset + close), and around each
infer round trip
(split into policy compute, timed by running the same policy call in this process, and wire = the
rest: encoding, socket, server dispatch). Everything else is the harness itself: observation
packing, chunking, video encoding, progress and record writes. The first env's one-time renderer
start-up is paid before the clock starts and reported apart.

Last line: `overhead_pct=<everything else / wall> episodes_per_hour=<3600 / mean episode wall>`.

Example:
  POLICY=replay $SIM_PY benchmarks/episode_overhead.py --task PickCube --episodes 3
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config import knobs  # noqa: E402
from harness.config.seedbank import read_bank_file, resolve_root  # noqa: E402
from harness.config.settings import Settings  # noqa: E402
from harness.episode.bench import load_benchmark  # noqa: E402
from harness.episode.simclient import SimAssignment, SimClient  # noqa: E402
from harness.model.policyload import load_policy  # noqa: E402
from harness.wire.client import PolicyClient  # noqa: E402
from harness.worker.model_server_process import ModelServerProcess  # noqa: E402

CLOCK: dict[str, float] = defaultdict(float)


def timed(key: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            CLOCK[key] += time.perf_counter() - t

    return wrapper


class TimedBench:
    """Wraps the benchmark so every episode's env reports step, render and setup time."""

    def __init__(self, bench: Any) -> None:
        self.bench, self.version = bench, bench.version

    def make_episode(self, task: str, bench_config: str, seed: int, **kw: Any) -> Any:
        t = time.perf_counter()
        episode = self.bench.make_episode(task, bench_config, seed, **kw)
        CLOCK["setup"] += time.perf_counter() - t
        env = episode.env
        if not hasattr(env, "timed_by_overhead"):  # a kept env (SIM_ENV_CACHE) is wrapped once
            # rendering = scene update + sensor capture + readback
            env._get_obs_sensor_data = timed("render", env._get_obs_sensor_data)
            env.step = timed("step", env.step)
            env.timed_by_overhead = True
        episode.close = timed("setup", episode.close)
        return episode


class TimedClient:
    """Wraps PolicyClient: times each infer round trip and the same policy call run locally."""

    def __init__(self, client: PolicyClient, policy: Any) -> None:
        self.client, self.policy, self.episode = client, policy, {}

    def hello(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self.client.hello(spec)

    def reset(self, task: str, task_config: str, instruction: str, seed: int) -> None:
        self.episode = {"task": task, "task_config": task_config, "seed": seed}
        self.client.reset(task, task_config, instruction, seed)

    def infer(self, obs: dict[str, Any], step: int) -> Any:
        t = time.perf_counter()
        chunk = self.client.infer(obs, step)
        CLOCK["rtt"] += time.perf_counter() - t
        local = dict(obs, episode=dict(self.episode, step=step))
        t = time.perf_counter()
        self.policy.act(local, self.episode["seed"], step)
        CLOCK["policy"] += time.perf_counter() - t
        return chunk


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="PickCube", help="task (default PickCube)")
    p.add_argument("--episodes", type=int, default=3, help="episodes K (default 3)")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error("--episodes must be >= 1")
    bench_config = knobs.get("BENCH_CONFIG")
    root = resolve_root(knobs.get("SEEDS_ROOT"), os.environ.get("BUNDLE", str(ROOT)))
    seeds = read_bank_file(root / args.task / f"table_{bench_config}.txt")[: args.episodes]
    env = dict(os.environ, EVAL_ROOT=str(ROOT), PYTHONPATH=str(ROOT))
    settings = Settings.from_env(env)
    with tempfile.TemporaryDirectory() as tmp:
        server = ModelServerProcess(Path(tmp) / "ready", Path(tmp) / "server.log", env, settings)
        try:
            server.ensure(timeout_s=300)
            bench = load_benchmark(settings.benchmark, settings)
            t = time.perf_counter()
            bench.make_episode(args.task, bench_config, seeds[0]).close()  # renderer start-up, once
            startup = time.perf_counter() - t
            policy = load_policy(
                knobs.get("POLICY"), knobs.get("CKPT_NAME"), knobs.get("POLICY_ARGS").split()
            )
            with PolicyClient.from_ready_file(server.ready_file) as client:
                unit = SimAssignment(Path(tmp) / "run", "table", args.task, seeds, "bench")
                sim = SimClient(TimedBench(bench), TimedClient(client, policy), unit, settings)
                CLOCK.clear()
                t = time.perf_counter()
                records = sim.run(report=lambda line: print(line, flush=True))
                wall = time.perf_counter() - t
        finally:
            server.stop()
    print_split(wall, startup, records)
    return 0


def print_split(wall: float, startup: float, records: list[dict[str, Any]]) -> None:
    steps = sum(r["steps"] for r in records)
    parts = {
        "sim step (physics + control)": CLOCK["step"] - CLOCK["render"],
        "rendering": CLOCK["render"],
        "episode setup (make/reset/close)": CLOCK["setup"],
        "policy compute": CLOCK["policy"],
        "wire (encode + socket + dispatch)": CLOCK["rtt"] - CLOCK["policy"],
    }
    other = wall - sum(parts.values())
    parts["everything else (harness)"] = other
    print(
        f"{len(records)} episodes, {steps} steps, {wall:.1f} s wall; renderer start-up {startup:.1f} s (once)"
    )
    for name, value in parts.items():
        share, per_step = 100 * value / wall, 1000 * value / max(steps, 1)
        print(f"  {name:<36} {value:8.2f} s  {share:5.1f}%  {per_step:7.2f} ms/step")
    print(f"overhead_pct={100 * other / wall:.2f} episodes_per_hour={3600 * len(records) / wall:.1f}")


if __name__ == "__main__":
    sys.exit(main())
