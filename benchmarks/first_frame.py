"""A sim process's first frame with the renderer's own BRDF table and with the one it is given.

Each sample is a fresh Python process (as a sim process is at its start) that builds one ManiSkill
episode and renders its first observation; its first-frame time runs from the process's start to
that frame, and its CPU time is what the process used to get there (user + system, all threads).
`own`: the renderer builds its BRDF table itself, as it did before `harness.episode.bench.brdf_lut`
(svulkan2's compute shader, on lavapipe); `given`: the table comes from the sim env, as now. The
two take turns, so load from elsewhere hits both alike.

Last line: `first_frame_own_s=<median> first_frame_given_s=<median> cpu_own_s=<median>
cpu_given_s=<median> saved_s=<own - given>`.

Example:
  $SIM_PY benchmarks/first_frame.py --samples 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import os, sys, time
t0 = float(sys.argv[1])
from harness.config.settings import Settings
from harness.episode.bench import brdf_lut
from harness.episode.bench.maniskill import ManiSkillBenchmark
if sys.argv[2] == "own":
    brdf_lut.give_to = lambda sensors: None
bench = ManiSkillBenchmark(Settings.from_env(os.environ))
episode = bench.make_episode("PickCube", "clean", 0)
episode.observe()
cpu = os.times()
print("first_frame_s", time.time() - t0, cpu.user + cpu.system)
episode.close()
"""


def sample(table: str) -> tuple[float, float]:
    """(first-frame seconds, CPU seconds) of one fresh process with `table` (own or given)."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(time.time()), table],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=600,
    ).stdout  # fmt: skip
    line = next(line for line in out.splitlines() if line.startswith("first_frame_s"))
    _, wall, cpu = line.split()
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=3, help="fresh processes of each kind (default 3)")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"own": [], "given": []}
    for index in range(args.samples):
        for table in results:
            wall, cpu = sample(table)
            results[table].append((wall, cpu))
            print(
                f"sample {index + 1}/{args.samples} {table:>5}: first frame {wall:5.2f} s, CPU {cpu:5.2f} s",
                flush=True,
            )
    wall = {table: statistics.median(w for w, _ in runs) for table, runs in results.items()}
    cpu = {table: statistics.median(c for _, c in runs) for table, runs in results.items()}
    print(
        f"first_frame_own_s={wall['own']:.2f} first_frame_given_s={wall['given']:.2f} "
        f"cpu_own_s={cpu['own']:.2f} cpu_given_s={cpu['given']:.2f} saved_s={wall['own'] - wall['given']:.2f}"
    )


if __name__ == "__main__":
    main()
