"""Create a run dir (queue + frozen run.yaml), record a fill-in, or verify an environment.

Knobs come from the environment (see `python -m harness.config.knobs --markdown`), as for every launch.

  new_run.py RUN --queue seeds/maniskill/queue.txt       create (re-creating the same run is a no-op)
  new_run.py RUN --fill-in --test-num 4                  raise EVAL_TEST_NUM (only new seeds run)
  new_run.py RUN --fill-in --seeds-root seeds/bank2      add a disjoint seed bank
  new_run.py RUN --verify                                check this environment, print the hash

RUN is a name under $RUNS_ROOT (one path component: letters, digits, '.', '_', '-') or an absolute
path. Creating a run checks every input first and writes nothing when one is refused. Exit status:
0 done, 2 refused (one line per problem, naming the knob or input and the form it takes, or each
differing knob with both values), 1 failed (a disk or peer error, naming it).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.config.contract import verify_environment
from harness.config.manifest import ContractMismatch, Manifest, ManifestError, contract_hash
from harness.config.paths import run_dir
from harness.config.rundir import QueueFileError, RunDir
from harness.config.seedbank import SeedBankError
from harness.config.settings import Settings
from harness.config.validate import run_arg_problem
from harness.episode.serverdial import probe
from harness.launch.newrun import new_fillin, new_run
from harness.process.failures import run_command
from harness.runqueue import run_units


def _summary(run_dir: str, manifest: Manifest) -> str:
    knobs = manifest.knobs
    banks = "".join(f", +{b['eval_test_num']} from {b['seeds_root']}" for b in manifest.fillin_banks)
    cells, units = manifest.contract["queue"]["cells"], len(run_units(RunDir(Path(run_dir))))
    source = f"from {knobs['SEEDS_ROOT']}" if manifest.contract["seeds"] else "seeds 0.. (USE_EVAL_SEEDS=0)"
    return (
        f"run {run_dir}: contract {contract_hash(manifest)}\n"
        f"  {cells} cells in {units} queue units (UNIT_SEEDS={knobs['UNIT_SEEDS']}), "
        f"EVAL_TEST_NUM={manifest.eval_test_num} "
        f"{source}{banks}; policy {knobs['POLICY']} ckpt {knobs['CKPT_NAME'] or '-'}; "
        f"{knobs['BENCHMARK']}/{knobs['BENCH_CONFIG']}\n"
        f"  {manifest.info.get('unit_split') or 'UNIT_SEEDS=' + knobs['UNIT_SEEDS']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", help="run name under $RUNS_ROOT, or a path")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--fill-in", action="store_true", help="record a fill-in instead of creating")
    action.add_argument("--verify", action="store_true", help="verify this environment; print the hash")
    parser.add_argument("--queue", help="queue file to copy into the run (required to create)")
    parser.add_argument("--test-num", type=int, help="fill-in: the new EVAL_TEST_NUM")
    parser.add_argument("--seeds-root", help="fill-in: a seed bank disjoint from the run's banks")
    args = parser.parse_args(argv)
    if (why := run_arg_problem(args.run)) is not None:
        print(f"new_run: {why}", file=sys.stderr)
        return 2
    run = run_dir(args.run)
    try:
        if args.verify:
            print(verify_environment(run, probe=probe(Settings.from_env(os.environ))))
            return 0
        if args.fill_in:
            manifest = new_fillin(run, args.test_num, args.seeds_root)
        elif args.queue is None:
            parser.error("creating a run needs --queue FILE")
        else:
            manifest = new_run(run, args.queue)
    except (ContractMismatch, ManifestError, QueueFileError, SeedBankError, ValueError) as exc:
        print(f"new_run: {exc}", file=sys.stderr)
        return 2
    print(_summary(str(run), manifest))
    return 0


if __name__ == "__main__":
    sys.exit(run_command("new_run", main))
