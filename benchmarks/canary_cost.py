"""What the canary adds to a worker's time to its first finished episode (issue 59's target: ≤ 5%).

Each sample is a fresh one-worker pool (`scripts/eval_one_worker.py`: run creation, the model
server, the sim process, the worker) on its own new run over `--queue` (default ManiSkill PickCube
then PushCube, POLICY=replay or --policy, EVAL_TEST_NUM=1), with the canary (CANARY=1, the default) or without
it (CANARY=0). Its time to first finished episode runs from the pool's start to the earliest record's
`finished_at`. The kinds take turns, so load from elsewhere hits both alike; each sample prints the
1-minute load average at its start, the canary's own time from the worker's log, and when the model
server was ready (the canary runs in the sim process's warm-up: it hides behind the model server's
load only as far as that load outlasts the warm-up).

Last line: `first_episode_canary_s=<median> first_episode_none_s=<median> ratio=<canary / none>
added_pct=<(ratio - 1) * 100> canary_s=<median canary time logged> load=<median load average>`.

Example:
  source env.sh && $SIM_PY benchmarks/canary_cost.py --samples 2
  source env.sh && $SIM_PY benchmarks/canary_cost.py --samples 2 --policy reference --ckpt reference
  source env.sh && $SIM_PY benchmarks/canary_cost.py --samples 2 --model-delay 20
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CANARY_LINE = re.compile(r"canary (\S+) seed \d+: .*\((\d+(?:\.\d+)?) s\)")
STAMP = re.compile(r"^(\S+) worker=\S+ (?:sim process pid \d+ started|model server pid \d+ loaded)", re.M)


def model_load_s(log: str) -> float | None:
    """Seconds from the sim process's start to the model server's ready line (1 s resolution): what
    the sim process's warm-up, and the canary in it, can hide behind."""
    stamps = [datetime.fromisoformat(m.group(1)).timestamp() for m in STAMP.finditer(log)]
    return stamps[1] - stamps[0] if len(stamps) >= 2 else None


def first_finished(run: Path) -> tuple[float, str] | None:
    """(epoch seconds, task) of the run's earliest record."""
    found = []
    for path in (run / "eval_result").rglob("_metrics*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip().endswith("}"):
                record = json.loads(line)
                found.append((datetime.fromisoformat(record["finished_at"]).timestamp(), record["task"]))
    return min(found) if found else None


def sample(
    tmp: Path, name: str, canary: bool, queue: Path, test_num: int, policy: str, ckpt: str
) -> tuple[float, float | None, str, float | None]:
    """(seconds to the first finished episode, the canary's logged seconds, the first task, the
    model server's load in seconds)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), EVAL_ROOT=str(ROOT), BUNDLE=str(ROOT), RUNS_ROOT=str(tmp))
    env.update(
        POLICY=policy,
        CKPT_NAME=ckpt,
        EVAL_TEST_NUM=str(test_num),
        RECORD_VIDEO="0",
        CANARY="1" if canary else "0",
    )
    env.setdefault("MODEL_PY", str(ROOT / "envs" / "model" / "bin" / "python"))
    env.setdefault("SIM_PY", sys.executable)
    argv = [
        sys.executable,
        str(ROOT / "scripts" / "eval_one_worker.py"),
        "--run",
        name,
        "--queue",
        str(queue),
    ]
    started = time.time()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{name}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    first = first_finished(tmp / name)
    if first is None:
        raise SystemExit(f"{name}: no record\n{done.stderr[-4000:]}")
    said = CANARY_LINE.search(done.stderr)
    if canary and said is None:
        raise SystemExit(f"{name}: the canary said nothing\n{done.stderr[-4000:]}")
    return first[0] - started, float(said.group(2)) if said else None, first[1], model_load_s(done.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=2, help="pools of each kind (default 2)")
    parser.add_argument("--queue-text", default="table PickCube\ntable PushCube\n", help="the queue's lines")
    parser.add_argument(
        "--policy", default="replay", help="POLICY (default replay: its server loads in ~1 s)"
    )
    parser.add_argument("--ckpt", default="", help="CKPT_NAME (e.g. reference, with --policy reference)")
    parser.add_argument(
        "--model-delay", type=float, default=0.0,
        help="seconds the model server waits before it starts (a wrapper around MODEL_PY): a model that "
        "loads that much longer, as a large checkpoint does",
    )  # fmt: skip
    parser.add_argument("--test-num", type=int, default=1, help="EVAL_TEST_NUM (default 1)")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"canary": [], "none": []}
    canary_s: list[float] = []
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="canary-cost-") as tmp:
        queue = Path(tmp) / "queue.txt"
        queue.write_text(args.queue_text)
        if args.model_delay > 0:  # a slower model load, the policy otherwise the same
            real = os.environ.get("MODEL_PY", str(ROOT / "envs" / "model" / "bin" / "python"))
            slow = Path(tmp) / "slow_model_py"
            slow.write_text(f'#!/bin/sh\nsleep {args.model_delay}\nexec {real} "$@"\n')
            slow.chmod(0o755)
            os.environ["MODEL_PY"] = str(slow)
        for index in range(args.samples):
            for kind in times:
                load = os.getloadavg()[0]
                loads.append(load)
                took, logged, task, model_s = sample(
                    Path(tmp),
                    f"{kind}{index}",
                    kind == "canary",
                    queue,
                    args.test_num,
                    args.policy,
                    args.ckpt,
                )
                times[kind].append(took)
                if logged is not None:
                    canary_s.append(logged)
                canary = f", canary {logged:.1f} s" if logged is not None else ""
                canary += (
                    f", model server ready {model_s:.0f} s after the sim process started"
                    if model_s is not None
                    else ""
                )
                print(
                    f"sample {index + 1}/{args.samples} {kind:>6}: first finished episode ({task}) at "
                    f"{took:5.1f} s{canary} (load {load:.1f})",
                    flush=True,
                )
    with_canary, without = statistics.median(times["canary"]), statistics.median(times["none"])
    ratio = with_canary / without
    print(
        f"first_episode_canary_s={with_canary:.1f} first_episode_none_s={without:.1f} ratio={ratio:.3f} "
        f"added_pct={(ratio - 1) * 100:.1f} canary_s={statistics.median(canary_s or [0.0]):.1f} "
        f"load={statistics.median(loads):.1f}"
    )


if __name__ == "__main__":
    main()
