"""Evaluate while you train, measured: the reference policy's trainer with a checkpoint watcher on
the same machine.

Two runs of the same short schedule of `scripts/train_reference_policy.py` (model env, --threads
`--threads`, saving every `--save-every` steps with --keep-checkpoints): first alone, then with
`orchestrators/watch.sh` watching its `checkpoints/` on a local pool of `--nodes` nodes (the
reference policy on ManiSkill3, `--tasks` x `--seeds` bank seeds a checkpoint, no videos), the
watcher under `nice -n --nice` (0: not niced). It prints, per checkpoint, when it appeared, when its
table was written and how long its eval took; then the lag from save to table (median, max) with
the eval's own time apart, and the trainer's step time alone and watched (median of its 25-step
intervals, saves included in both) and their ratio. It prints figures; it does not pass or fail.

Last line: `checkpoints=<n> lag_median_s=<x> lag_max_s=<x> eval_median_s=<x> wait_median_s=<x>
step_alone_ms=<x> step_watched_ms=<x> step_ratio=<x>`.

Example (needs training data: scripts/collect_training_data.py --tasks PushCube PullCube --num 3):
  $SIM_PY benchmarks/watch.py --data data/bench_watch --steps 900 --save-every 300
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP_LINE = re.compile(r"^step (\d+)/\d+ ")


def _lines(proc: subprocess.Popen[str], sink: list[tuple[float, str]]) -> None:
    for line in proc.stdout or []:
        sink.append((time.monotonic(), line.rstrip("\n")))


def train(args: argparse.Namespace, out: Path, watched: dict[str, float] | None) -> list[float]:
    """Run the trainer to the end; its step times (s) from the progress lines' arrival. With
    `watched`, record when each kept checkpoint appeared (monotonic s)."""
    model_py = os.environ.get("MODEL_PY") or str(ROOT / "envs" / "model" / "bin" / "python")
    cmd = [model_py, str(ROOT / "scripts" / "train_reference_policy.py"), "--data", str(args.data),
           "--out", str(out), "--steps", str(args.steps), "--save-every", str(args.save_every),
           "--log-every", "25", "--threads", str(args.threads), "--batch", str(args.batch),
           "--keep-checkpoints"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    lines: list[tuple[float, str]] = []
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reader = threading.Thread(target=_lines, args=(proc, lines), daemon=True)
    reader.start()
    while proc.poll() is None:
        if watched is not None and (out / "checkpoints").is_dir():
            for path in (out / "checkpoints").iterdir():
                if re.fullmatch(r"step_\d+", path.name):  # not step_N.tmp, being written
                    watched.setdefault(path.name, time.monotonic())
        time.sleep(0.2)
    reader.join(10)
    if proc.returncode != 0:
        sys.exit("watch benchmark: the trainer failed:\n" + "\n".join(line for _, line in lines[-20:]))
    marks = [(t, int(m.group(1))) for t, line in lines if (m := STEP_LINE.match(line))]
    return [(t1 - t0) / (s1 - s0) for (t0, s0), (t1, s1) in itertools.pairwise(marks) if s1 > s0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=ROOT / "data" / "bench_watch", help="collector output")
    p.add_argument("--steps", type=int, default=900)
    p.add_argument("--save-every", type=int, default=300)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=1, help="the trainer's torch threads")
    p.add_argument("--nodes", type=int, default=2, help="the watcher's local pool")
    p.add_argument("--tasks", nargs="+", default=["PushCube", "PullCube"])
    p.add_argument("--seeds", type=int, default=2, help="bank seeds a task (EVAL_TEST_NUM)")
    p.add_argument("--settle", type=float, default=5.0)
    p.add_argument("--nice", type=int, default=10, help="the watcher's niceness (0: not niced)")
    p.add_argument("--keep", type=Path, help="keep the work dir here (the runs, the curve)")
    args = p.parse_args()
    if not (args.data / "data_card.json").is_file():
        sys.exit(f"watch benchmark: no training data at {args.data} (scripts/collect_training_data.py)")
    work = Path(tempfile.mkdtemp(prefix="bench_watch_"))
    try:
        alone = train(args, work / "alone", None)
        print(
            f"trainer alone: {len(alone)} intervals, median step {1000 * statistics.median(alone):.1f} ms",
            flush=True,
        )
        queue = work / "queue.txt"
        queue.write_text("".join(f"table {t}\n" for t in args.tasks))
        env = {**os.environ, "POLICY": "reference", "BENCHMARK": "maniskill", "BENCH_CONFIG": "clean"}
        env.update(EVAL_TEST_NUM=str(args.seeds), RECORD_VIDEO="0", RUNS_ROOT=str(work / "runs"))
        ckpts = work / "watched" / "checkpoints"
        ckpts.mkdir(parents=True)
        watch = ["bash", str(ROOT / "orchestrators" / "watch.sh"), str(ckpts), "--queue", str(queue),
                 "--nodes", str(args.nodes), "--settle", str(args.settle),
                 "--progress-every", "30", "--run-prefix", "bench"]  # fmt: skip
        if args.nice:
            watch = ["nice", "-n", str(args.nice), *watch]
        lines: list[tuple[float, str]] = []
        proc = subprocess.Popen(watch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        reader = threading.Thread(target=_lines, args=(proc, lines), daemon=True)
        reader.start()
        appeared: dict[str, float] = {}
        watched = train(args, work / "watched", appeared)
        trained = time.monotonic()
        print(f"trainer watched: median step {1000 * statistics.median(watched):.1f} ms", flush=True)

        def tables() -> dict[int, float]:  # when the watcher said a checkpoint's table was written
            found = [(t, re.match(r"\[watch\] \S+ step (\d+): SR ", line)) for t, line in list(lines)]
            return {int(m.group(1)): t for t, m in found if m}

        deadline = time.monotonic() + 3600
        while proc.poll() is None and len(tables()) < len(appeared) and time.monotonic() < deadline:
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)  # the watcher stops its pool (none left running by now)
        proc.wait(60)
        reader.join(10)
        for _, line in lines:
            print(f"  {line}")
        table_at = tables()
        if len(table_at) < len(appeared):
            sys.exit(f"watch benchmark: {len(appeared) - len(table_at)} checkpoint(s) without a table")
        evals = {int(m.group(1)): float(m.group(2)) for _, line in lines
                 if (m := re.search(r"step (\d+): .*complete in ([\d.]+) s", line))}  # fmt: skip
        lags, waits = [], []
        for step, at in sorted((int(name.removeprefix("step_")), at) for name, at in appeared.items()):
            if step in table_at:
                lag = table_at[step] - at
                lags.append(lag)
                waits.append(lag - evals.get(step, 0.0))
                done = "after training" if table_at[step] > trained else "during training"
                print(
                    f"step {step}: table {lag:.1f} s after the save ({done}); eval {evals.get(step, 0):.1f} s"
                )
        if args.keep:
            shutil.copytree(work, args.keep, dirs_exist_ok=True, symlinks=True)
        step_alone, step_watched = statistics.median(alone), statistics.median(watched)
        print(
            f"checkpoints={len(lags)} lag_median_s={statistics.median(lags):.1f} lag_max_s={max(lags):.1f} "
            f"eval_median_s={statistics.median(evals.values()):.1f} "
            f"wait_median_s={statistics.median(waits):.1f} "
            f"step_alone_ms={1000 * step_alone:.1f} step_watched_ms={1000 * step_watched:.1f} "
            f"step_ratio={step_watched / step_alone:.2f}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
