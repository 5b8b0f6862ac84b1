"""Does a node-local Mesa shader cache shorten a sim process's first frame?

Each sample is a fresh Python process (as a restarted sim process is) that builds one ManiSkill
episode and renders its first observation; the time from the process's start to that frame is its
first-frame time. Three cache settings of Mesa (the lavapipe Vulkan driver's disk cache):
`off` (MESA_SHADER_CACHE_DISABLE=true), `cold` (MESA_SHADER_CACHE_DIR = a new empty dir per
sample) and `warm` (one dir, filled by an unmeasured first process, then reused: what a cache under
NODE_CACHE would give every later process on the node).

Last line: `first_frame_off_s=<median> first_frame_cold_s=<median> first_frame_warm_s=<median>
warm_gain_pct=<(cold - warm) / cold * 100>`.

Example:
  $SIM_PY benchmarks/shader_cache.py --samples 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import time
t0 = float(__import__("sys").argv[1])
from harness.config.settings import Settings
from harness.episode.bench.maniskill import ManiSkillBenchmark
bench = ManiSkillBenchmark(Settings.from_env(os.environ))
episode = bench.make_episode({task!r}, "clean", 0)
episode.observe()
print("first_frame_s", time.time() - t0)
episode.close()
"""


def first_frame(task: str, env: dict[str, str]) -> float:
    import time

    code = CHILD.format(task=task)
    done = subprocess.run(
        [sys.executable, "-c", code, str(time.time())], env=env, capture_output=True, text=True, cwd=ROOT
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("first_frame_s")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"shader_cache: the child failed ({done.returncode}): {done.stderr[-2000:]}")
    return float(line.split()[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=3, help="processes per cache setting (3)")
    p.add_argument("--task", default="PickCube", help="task whose first frame is timed (PickCube)")
    args = p.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("MESA_SHADER_CACHE")}
    base.update(PYTHONPATH=str(ROOT), IMAGE_SIZE=base.get("IMAGE_SIZE", "224"))
    times: dict[str, list[float]] = {"off": [], "cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="shader-cache-") as tmp:
        warm = Path(tmp) / "warm"
        first_frame(args.task, {**base, "MESA_SHADER_CACHE_DIR": str(warm)})  # fills the warm cache
        for sample in range(args.samples):  # interleaved, so a load change hits every setting alike
            times["off"].append(first_frame(args.task, {**base, "MESA_SHADER_CACHE_DISABLE": "true"}))
            cold = Path(tmp) / f"cold{sample}"
            times["cold"].append(first_frame(args.task, {**base, "MESA_SHADER_CACHE_DIR": str(cold)}))
            times["warm"].append(first_frame(args.task, {**base, "MESA_SHADER_CACHE_DIR": str(warm)}))
            said = ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items())
            print(f"sample {sample}: {said}", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    gain = (med["cold"] - med["warm"]) / med["cold"] * 100
    print(
        f"first_frame_off_s={med['off']:.2f} first_frame_cold_s={med['cold']:.2f} "
        f"first_frame_warm_s={med['warm']:.2f} warm_gain_pct={gain:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
