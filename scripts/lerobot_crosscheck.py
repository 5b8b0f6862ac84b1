"""The per-episode cross-check against LeRobot's own evaluation (issue 60): the same policy on the same
MetaWorld tasks and seeds 0..N-1, run once by LeRobot (scripts/lerobot_eval_reference.py on
$LEROBOT_PY: `lerobot-eval` itself for a checkpoint, LeRobot's `eval_policy` loop for the oracle) and
once by our pool (the debug launcher, scripts/eval_one_worker.py: BENCHMARK=metaworld, USE_EVAL_SEEDS=0,
EVAL_TEST_NUM=N), side by side, with the same step limit. Success must be identical per (task, seed).

Prints one line per episode (each side's success and steps), then the figure line
`lerobot_crosscheck_agreement=<share> episodes=<n> agree=<n> steps_agree=<n> ...`. Exits 1 when an
episode's success differs or only one side ran it, naming each such (task, seed) with both sides'
outcome on stderr; steps that differ are listed but are not the contract. --compare compares two
outcome files (JSONL {task, seed, success, steps}) without running anything; each run leaves its two
files (lerobot.jsonl, ours.jsonl) and both sides' logs in --work. How the sides' seeds and step limits
were aligned: docs/lerobot-crosscheck.md.

Examples (from the repository root, after `source env.sh`):
  $SIM_PY scripts/lerobot_crosscheck.py --policy oracle --tasks door-open-v3,peg-insert-side-v3 \\
      --episodes 5 --max-steps 85
  $SIM_PY scripts/lerobot_crosscheck.py --policy lerobot-act-metaworld --episodes 10
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.config.paths import resolve_checkpoint
from harness.config.rundir import RunDir
from harness.episode.bench.metaworld import HORIZON, task_list
from harness.episode.records import read_tree
from harness.process.failures import run_command

REPO = Path(__file__).resolve().parents[1]
Outcomes = dict[tuple[str, int], tuple[bool, int | None]]  # (task, seed) -> (success, steps)
TIMEOUT_S = 7200  # either side's run: a trained policy renders 480 px frames on the CPU


def read_outcomes(path: Path) -> Outcomes:
    """(task, seed) -> (success, steps) of a JSONL outcome file."""
    outcomes: Outcomes = {}
    for line in path.read_text().splitlines():
        ep = json.loads(line)
        outcomes[(ep["task"], int(ep["seed"]))] = (bool(ep["success"]), ep.get("steps"))
    return outcomes


def write_outcomes(path: Path, outcomes: Outcomes) -> None:
    lines = [
        json.dumps({"task": task, "seed": seed, "success": success, "steps": steps})
        for (task, seed), (success, steps) in sorted(outcomes.items())
    ]
    path.write_text("".join(line + "\n" for line in lines))


def pool_outcomes(run_root: Path) -> Outcomes:
    """Our records' (success, steps) per (task, seed); an errored episode is no outcome (it names
    itself as a RuntimeError: an error is not a trial on either side)."""
    outcomes: Outcomes = {}
    for record in read_tree(RunDir(run_root).results).records.values():
        if record["error"] is not None:
            raise RuntimeError(f"ours {record['task']} seed {record['seed']} errored: {record['error']}")
        outcomes[(record["task"], int(record["seed"]))] = (bool(record["success"]), int(record["steps"]))
    return outcomes


def describe(outcome: tuple[bool, int | None] | None) -> str:
    if outcome is None:
        return "no episode"
    success, steps = outcome
    return f"{'success' if success else 'failure'} after {'?' if steps is None else steps} steps"


def compare(theirs: Outcomes, ours: Outcomes) -> tuple[list[str], list[str], int]:
    """(one line per episode, one line per mismatching episode, how many episodes' steps agree)."""
    lines, mismatches, steps_agree = [], [], 0
    for task, seed in sorted(set(theirs) | set(ours)):
        a, b = theirs.get((task, seed)), ours.get((task, seed))
        same = a is not None and b is not None and a[0] == b[0]
        same_steps = a is not None and b is not None and a[1] is not None and a[1] == b[1]
        steps_agree += same_steps
        line = f"{task} seed {seed}: lerobot {describe(a)}, ours {describe(b)}"
        lines.append(
            f"{line}: {'agree' if same else 'MISMATCH'}{'' if same_steps or not same else ' (steps differ)'}"
        )
        if not same:
            mismatches.append(line)
    return lines, mismatches, steps_agree


def report(theirs: Outcomes, ours: Outcomes, extra: str = "") -> int:
    lines, mismatches, steps_agree = compare(theirs, ours)
    for line in lines:
        print(line)
    episodes = len(lines)
    agree = episodes - len(mismatches)
    share = agree / episodes if episodes else 0.0
    print(
        f"lerobot_crosscheck_agreement={share:.3f} episodes={episodes} agree={agree} "
        f"steps_agree={steps_agree}{extra}"
    )
    for line in mismatches:
        print(f"lerobot_crosscheck: mismatch: {line}", file=sys.stderr)
    return 1 if mismatches or not episodes else 0


def side_env(work: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), EVAL_ROOT=str(REPO), MUJOCO_GL="egl")
    env.setdefault("BUNDLE", str(REPO))
    env["RUNS_ROOT"] = str(work)
    env.pop("ACTION_CONVENTION", None)  # MetaWorld's own applies
    return env


def start_lerobot(args: argparse.Namespace, policy: str, work: Path) -> subprocess.Popen:
    python = os.environ.get("LEROBOT_PY") or str(REPO / "envs" / "lerobot" / "bin" / "python")
    argv = [
        python, str(REPO / "scripts" / "lerobot_eval_reference.py"), "--policy", policy,
        "--tasks", ",".join(args.tasks), "--episodes", str(args.episodes), "--max-steps", str(args.max_steps),
        "--out", str(work / "lerobot.jsonl"), "--work", str(work / "lerobot-eval"),
    ]  # fmt: skip
    with (work / "lerobot.log").open("w") as log:
        return subprocess.Popen(argv, env=side_env(work), stdout=log, stderr=subprocess.STDOUT, cwd=REPO)


def start_ours(args: argparse.Namespace, work: Path) -> subprocess.Popen:
    """The debug launcher over the tasks' seeds 0..N-1: the real worker, model server and sim."""
    queue = work / "queue.txt"
    queue.write_text("".join(f"metaworld {task}\n" for task in args.tasks))
    mt10 = set(task_list("MT10"))
    env = side_env(work)
    env.update(
        BENCHMARK="metaworld", BENCH_CONFIG="MT10" if set(args.tasks) <= mt10 else "MT50",
        USE_EVAL_SEEDS="0", EVAL_TEST_NUM=str(args.episodes), RECORD_VIDEO="0",
    )  # fmt: skip
    if args.policy == "oracle":
        env.update(POLICY="metaworld_oracle", CKPT_NAME="")
        params = {"privileged_state": True, "cameras": []}
    else:
        env.update(POLICY="lerobot", CKPT_NAME=args.policy)
        params = {}  # LeRobot's camera: corner2 at 480 px, turned upright as LeRobot turns it
    env["BENCH_PARAMS"] = json.dumps({**params, "max_steps": args.max_steps})
    argv = [
        sys.executable,
        str(REPO / "scripts" / "eval_one_worker.py"),
        "--run",
        "ours",
        "--queue",
        str(queue),
    ]
    with (work / "ours.log").open("w") as log:
        return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)


def wait_both(procs: dict[str, subprocess.Popen], work: Path, started: float) -> dict[str, float]:
    """Each side's wall seconds from `started` to its exit; a side that fails (or outlives TIMEOUT_S)
    is a RuntimeError with its log's tail, and whatever still runs is killed."""
    done: dict[str, float] = {}
    try:
        while len(done) < len(procs):
            for side, proc in procs.items():
                if side not in done and proc.poll() is not None:
                    done[side] = time.monotonic() - started
                    if proc.returncode != 0:
                        log = work / f"{side}.log"
                        raise RuntimeError(
                            f"the {side} side exited {proc.returncode}; {log}:\n{log.read_text()[-3000:]}"
                        )
            if time.monotonic() - started > TIMEOUT_S:
                raise RuntimeError(f"still running after {TIMEOUT_S} s: {sorted(set(procs) - set(done))}")
            time.sleep(0.5)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--policy", default="oracle", help="`oracle` (MetaWorld's scripted policies), or a CKPT_NAME"
    )
    p.add_argument(
        "--tasks", default="door-open-v3,peg-insert-side-v3", help="MetaWorld env names, comma-separated"
    )
    p.add_argument("--episodes", type=int, default=5, help="episodes per task: seeds 0..N-1")
    p.add_argument(
        "--max-steps", type=int, default=0, help=f"both sides' step limit; 0: MetaWorld's {HORIZON}"
    )
    p.add_argument("--work", type=Path, help="where both sides' outputs and logs go (default: a temp dir)")
    p.add_argument(
        "--compare", nargs=2, type=Path, metavar=("LEROBOT", "OURS"), help="compare two outcome files"
    )
    args = p.parse_args()
    if args.compare:
        return report(read_outcomes(args.compare[0]), read_outcomes(args.compare[1]))
    args.tasks = [task.strip() for task in args.tasks.split(",") if task.strip()]
    known = task_list("MT50")
    if unknown := [task for task in args.tasks if task not in known]:
        p.error(f"--tasks: not MetaWorld (MT50) tasks: {', '.join(unknown)}")
    if args.episodes < 1 or not 0 <= args.max_steps <= HORIZON:
        p.error(f"--episodes must be >= 1 and --max-steps 0..{HORIZON}")
    policy = "oracle"
    if args.policy != "oracle":
        ckpt = resolve_checkpoint(args.policy)
        if ckpt is None or not (ckpt / "config.json").is_file():
            p.error(
                f"--policy {args.policy}: no LeRobot checkpoint (config.json) there or under checkpoints/"
            )
        policy = str(ckpt)
    work = args.work or Path(tempfile.mkdtemp(prefix="lerobot_crosscheck."))
    work.mkdir(parents=True, exist_ok=True)
    print(f"lerobot_crosscheck: both sides' outputs and logs in {work}", file=sys.stderr)
    started = time.monotonic()
    procs = {"lerobot": start_lerobot(args, policy, work), "ours": start_ours(args, work)}
    seconds = wait_both(procs, work, started)
    ours = pool_outcomes(work / "ours")
    write_outcomes(work / "ours.jsonl", ours)
    extra = (
        f" policy={args.policy} max_steps={args.max_steps or HORIZON} lerobot_s={seconds['lerobot']:.0f} "
        f"ours_s={seconds['ours']:.0f} wall_s={time.monotonic() - started:.0f}"
    )
    return report(read_outcomes(work / "lerobot.jsonl"), ours, extra)


if __name__ == "__main__":
    sys.exit(run_command("lerobot_crosscheck", main))
