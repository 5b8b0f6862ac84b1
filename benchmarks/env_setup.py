"""What an episode's env costs before its first step, in a sim process that already ran one.

Per episode: `make_episode` (build or cached-env rebuild, reset to the seed, first render) plus the
previous episode's `close`, over `--episodes` seeds of one task with rendering, three ways in one
process, interleaved: `unfrozen` (a fresh env per episode with the process's heap not frozen, so
ManiSkill's two full gc.collect() calls an episode walk everything torch and SAPIEN imported: the
code before SIM_ENV_CACHE), `fresh` (a fresh env per episode, heap frozen: SIM_ENV_CACHE=0) and
`cached` (SIM_ENV_CACHE's reconfigure of a kept env). Medians in seconds.

Last line: `unfrozen_s=<median> fresh_s=<median> cached_s=<median> saved_s=<unfrozen - cached>`.

Example:
  $SIM_PY benchmarks/env_setup.py --episodes 8
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config.settings import Settings  # noqa: E402
from harness.episode.bench.maniskill import ManiSkillBenchmark  # noqa: E402
from harness.episode.bench.maniskill_cache import EnvCache  # noqa: E402


def setup_time(bench: ManiSkillBenchmark, task: str, config: str, seed: int) -> float:
    started = time.perf_counter()
    episode = bench.make_episode(task, config, seed)
    took = time.perf_counter() - started
    started = time.perf_counter()
    episode.close()
    return took + time.perf_counter() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=8, help="seeds timed per way (8)")
    p.add_argument("--task", default="PickCube", help="task (PickCube)")
    p.add_argument("--config", default="clean", help="task config level (clean)")
    args = p.parse_args()
    os.environ.setdefault("IMAGE_SIZE", "224")
    bench = ManiSkillBenchmark(Settings.from_env(os.environ))
    setup_time(bench, args.task, args.config, 0)  # the process's first env: render start-up, not timed
    times: dict[str, list[float]] = {"unfrozen": [], "fresh": [], "cached": []}
    for seed in range(1, args.episodes + 1):
        for way in times:
            if way == "unfrozen":
                gc.unfreeze()
            bench.envs = EnvCache(2 if way == "cached" else 0)
            if way == "cached":
                setup_time(bench, args.task, args.config, seed + 1000)  # fills the cache
            times[way].append(setup_time(bench, args.task, args.config, seed))
            bench.envs.close()
            gc.freeze()
        said = ", ".join(f"{way} {t[-1]:.3f} s" for way, t in times.items())
        print(f"seed {seed}: {said}", flush=True)
    med = {way: statistics.median(t) for way, t in times.items()}
    print(
        f"unfrozen_s={med['unfrozen']:.3f} fresh_s={med['fresh']:.3f} cached_s={med['cached']:.3f} "
        f"saved_s={med['unfrozen'] - med['cached']:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
