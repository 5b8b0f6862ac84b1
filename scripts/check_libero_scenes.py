"""Check LIBERO's settled scenes on this sim env against the reference made on the pinned MuJoCo.

Each task of the chosen suites (default: all five, 130 tasks) is set up at init states 0, 1 and 2 as
an episode is (the env, reset, init state, 10 settle steps), and each object its BDDL names must sit
where the reference has it (within 2 mm), must not have slid or fallen from where the init state put
it, and must be at rest. Prints one line per broken scene and a summary; exits 1 when any scene is
broken, 2 on bad input. `--write` makes the reference from this env instead (on the pinned stack only).

Example: check_libero_scenes.py --suites libero_spatial libero_10 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.config.settings import Settings
from harness.config.simstack import sim_stack
from harness.episode.bench.libero_scenes import (
    INIT_STATES_CHECKED,
    POSITION_TOL,
    REFERENCE,
    SUITES,
    check_tasks,
    load_reference,
)
from harness.episode.bench.libero_suite import PINNED_MUJOCO, suite_tasks
from harness.process.failures import Refused, run_command

CHUNK = 5  # tasks a process takes at a time: libero_90's 90 would leave the other processes idle


def _chunks(suite: str) -> list[list[int]]:
    n = len(suite_tasks(suite))
    return [list(range(i, min(i + CHUNK, n))) for i in range(0, n, CHUNK)]


def _check(job: tuple) -> list:
    return check_tasks(*job)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--suites",
        nargs="+",
        default=list(SUITES),
        choices=SUITES,
        metavar="SUITE",
        help=f"LIBERO suites to check (default: all five: {', '.join(SUITES)})",
    )
    parser.add_argument(
        "--init-states",
        nargs="+",
        type=int,
        default=list(INIT_STATES_CHECKED),
        metavar="N",
        help="init states of each task (default: 0 1 2; --write keeps these)",
    )
    parser.add_argument(
        "--reference", type=Path, default=REFERENCE, help=f"the reference (default: {REFERENCE})"
    )
    parser.add_argument("--jobs", type=int, default=1, help="processes to check in (default 1)")
    parser.add_argument("--write", action="store_true", help="write the reference from this env")
    parser.add_argument("--json", type=Path, help="also write every scene's result here")
    args = parser.parse_args()
    stack = sim_stack("libero")
    if not 0 < args.jobs <= 16:
        raise Refused(f"--jobs {args.jobs}: expected 1 to 16")
    if bad := [n for n in args.init_states if not 0 <= n < 50]:
        raise Refused(f"--init-states {bad}: LIBERO's init states are 0..49")
    if args.write and stack["mujoco"] != PINNED_MUJOCO:
        raise Refused(
            f"--write: this sim env has mujoco {stack['mujoco']}; the reference is made on {PINNED_MUJOCO}"
        )
    if args.write:
        reference = None
    elif not args.reference.is_file():
        raise Refused(
            f"--reference {args.reference}: no such file (make one with --write on the pinned stack)"
        )
    else:
        reference = load_reference(args.reference)
    print(
        f"checking {', '.join(args.suites)} at init states {args.init_states} on "
        f"{' '.join(f'{k}=={v}' for k, v in stack.items())}",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    seeds = tuple(args.init_states)
    settings = Settings.from_env(os.environ)
    jobs = [(settings, suite, chunk, seeds, reference) for suite in args.suites for chunk in _chunks(suite)]
    results = []
    context = multiprocessing.get_context("spawn")  # MuJoCo's GL state does not survive a fork
    with context.Pool(args.jobs) as pool:
        for checked in pool.imap(_check, jobs):
            results += checked
            broken = sum(1 for c in results if c.problems)
            print(f"[{time.monotonic() - started:4.0f} s] {len(results)} scenes checked, {broken} broken "
                  f"(last {checked[-1].key})", file=sys.stderr, flush=True)  # fmt: skip
    if args.write:
        scenes = {c.key: c.settled.reference() for c in results}
        lines = ",\n".join(
            f"{json.dumps(key)}: {json.dumps(scene, sort_keys=True)}" for key, scene in scenes.items()
        )
        head = {"stack": stack, "position_tol_m": POSITION_TOL}
        args.reference.write_text(
            json.dumps(head)[:-1] + ', "scenes": {\n' + lines + "\n}}\n"
        )  # a scene a line
        unsettled = sum(1 for scene in scenes.values() if scene["unsettled"])
        print(f"wrote {len(scenes)} scenes ({unsettled} with objects the init state leaves unsettled) "
              f"to {args.reference}")  # fmt: skip
        return 0
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "key": c.key,
                        "task": c.task,
                        "problems": c.problems,
                        "gap_m": c.gap,
                        **c.settled.__dict__,
                    }
                    for c in results
                ],
                indent=1,
            )
        )
    broken = [c for c in results if c.problems]
    for c in broken:
        print(f"BROKEN {c.key} ({c.task}): " + "; ".join(c.problems))
    exact = sum(
        1
        for c in results
        if reference
        and c.key in reference["scenes"]
        and reference["scenes"][c.key]["digest"] == c.settled.digest
    )
    print(
        f"{len(results)} scenes, {len(broken)} broken, {exact} bit-identical to the reference, "
        f"{time.monotonic() - started:.0f} s"
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(run_command("check_libero_scenes.py", main))
