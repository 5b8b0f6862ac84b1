"""Evaluate while you train: every complete checkpoint a trainer saves becomes a run on the pool.

  orchestrators/watch.sh CKPT_DIR --queue seeds/maniskill_queue.txt [--settle 30] [--nodes 2] [--once]

CKPT_DIR is where the trainer saves checkpoints, one entry per save whose name ends in its step
(`step_4000`, `checkpoint-4000`). An entry is complete once its files have not changed for --settle
seconds; one still being written or copied is never evaluated. Each complete checkpoint becomes the
run `<prefix>_step<N>` under $RUNS_ROOT, created from the current knobs (POLICY, BENCHMARK,
BENCH_CONFIG, EVAL_TEST_NUM, EVAL_STOP, ...) with CKPT_NAME set to it, and runs on one pool
(LAUNCHER=local, srun or submitit, --nodes), the newest checkpoint first. A checkpoint deleted while it is
evaluated stops its pool; its records stay and its run is marked dropped. What is done is read from
the run dirs, so re-running the same command resumes and never runs a finished run again. After each
run: its tables (organize_results), the learning curve over the series (curve.csv, curve.json,
curve.html with each checkpoint's paired verdict against the best so far) under --out, and, when
asked, the point logged to TensorBoard (--tensorboard DIR) and W&B (--wandb-project, offline unless
--wandb-mode online).

Exit status: 0 when it stopped with nothing left (--once, --idle-exit), 2 for bad input (a missing
directory or queue, a checkpoint the policy cannot load, knobs that differ from the series' runs:
one line naming it), 1 when a pool failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.config.manifest import ContractMismatch, Manifest, ManifestError
from harness.config.paths import run_dir
from harness.config.rundir import QueueFileError, RunDir
from harness.config.seedbank import SeedBankError
from harness.config.settings import Settings
from harness.launch import pools, series
from harness.launch.ckptscan import Checkpoint, CheckpointDir, series_prefix
from harness.launch.dashboards import dashboards_from_args
from harness.launch.drive import PoolLaunch, launch_env
from harness.launch.preflight import first_failure, first_refusal
from harness.launch.progress import progress
from harness.launch.seriesout import publish
from harness.process.failures import FAILED, REFUSED, run_command

LOAD_REFUSED = "model server exited with 2"  # the worker's line when get_model refused the checkpoint
REFUSALS = (ContractMismatch, ManifestError, QueueFileError, SeedBankError, ValueError)
Say = Callable[[str], None]


class WatchRefused(ValueError):
    """Bad input: the message is one line naming it."""


def say(line: str) -> None:
    print(f"[watch] {time.strftime('%H:%M:%S')} {line}", flush=True)


def one_line(exc: BaseException | str) -> str:
    """A refusal's headline and its first problem, on one line."""
    lines = [s.strip().removeprefix("- ").rstrip(":") for s in str(exc).splitlines() if s.strip()]
    return ": ".join(lines[:2]) if len(lines) > 1 else (lines[0] if lines else type(exc).__name__)


@dataclass
class InFlight:
    ckpt: Checkpoint
    run: RunDir
    manifest: Manifest
    pool: pools.Started
    began: float


@dataclass
class Watcher:
    ckpts: CheckpointDir
    queue: Path
    prefix: str
    launch: PoolLaunch
    out: Path
    say: Say = say
    dashboards: list = field(default_factory=list)
    failed: set[int] = field(default_factory=set)  # steps whose pool failed in this session
    current: InFlight | None = None
    finished: int = 0
    _states: dict[int, str] | None = None

    def states(self) -> dict[int, str]:
        """Each run's state by step, read from the run dirs when something changed since the last read
        (a checkpoint completed or went, a pool started or ended), so an idle watcher reads no records."""
        if self._states is None:
            self._states = {r.step: r.state for r in series.series(self.prefix)}
        return self._states

    def pending(self) -> list[Checkpoint]:
        """Complete checkpoints whose run is not done, newest first (a dropped one that came back
        resumes its run)."""
        state = self.states()
        return sorted((c for c in self.ckpts.complete.values() if state.get(c.step) != "done"), reverse=True)

    def todo(self) -> list[Checkpoint]:
        """`pending()` less the checkpoints whose pool failed in this session (retried on restart)."""
        return [c for c in self.pending() if c.step not in self.failed]

    def step(self) -> bool:
        """One look and one scheduling decision; False once there is nothing left to do now."""
        scan = self.ckpts.look()
        if scan.complete or scan.deleted:
            self._states = None
        for ckpt in scan.complete:
            self.say(f"checkpoint step {ckpt.step} complete ({ckpt.path.name})")
        for ckpt in scan.deleted:
            self._deleted(ckpt)
        if self.current is not None and (code := pools.finished(self.current.pool)) is not None:
            self._states = None
            self._ended(code)
        if self.current is None and (todo := self.todo()):
            self._start(todo[0])
        return bool(self.current or scan.settling)

    def _deleted(self, ckpt: Checkpoint) -> None:
        cur = self.current
        if cur is not None and cur.ckpt.path == ckpt.path:
            pools.terminate_all()
            done = progress(cur.run, cur.manifest)
            series.mark_dropped(cur.run, ckpt, done)
            self._states = None
            self.say(
                f"checkpoint step {ckpt.step} deleted while evaluated: pool stopped, {done.line()} kept "
                f"in {cur.run.name} (marked dropped)"
            )
            self.current = None
        elif self.states().get(ckpt.step) == "done":
            self.say(f"checkpoint step {ckpt.step} deleted ({ckpt.path.name}) after its eval: its run stays")
        else:
            self.say(f"checkpoint step {ckpt.step} deleted ({ckpt.path.name}) before its eval: dropped")

    def _start(self, ckpt: Checkpoint) -> None:
        try:
            run, manifest = series.create(self.prefix, ckpt, self.queue, os.environ)
        except REFUSALS as exc:
            raise WatchRefused(f"checkpoint {ckpt.path} (step {ckpt.step}): {one_line(exc)}") from None
        left = progress(run, manifest)
        if left.complete:  # completed meanwhile (by a pool a killed watcher left running)
            self._states = None
            return
        env = launch_env(run, manifest, os.environ)
        pool = pools.Pool(run, self.launch.nodes, env, f"watch-{ckpt.step}")
        started = pools.start(pool, self.launch.launcher, self.launch.eval_root, self.launch.srun_args)
        self.current = InFlight(ckpt, run, manifest, started, time.monotonic())
        self._states = None
        where = f"{self.launch.launcher} pool of {pool.nodes} node(s) on {run.name}"
        self.say(f"step {ckpt.step}: {where}: {left.line()}")

    def _ended(self, code: int) -> None:
        cur, self.current = self.current, None
        assert cur is not None
        final = progress(cur.run, cur.manifest)
        took = time.monotonic() - cur.began
        if code != 0:
            if why := _refusal(cur.run.logs):
                raise WatchRefused(f"checkpoint {cur.ckpt.path} (step {cur.ckpt.step}): {why}")
            self.failed.add(cur.ckpt.step)
            self.say(
                f"step {cur.ckpt.step}: pool exited with status {code} ({final.line()}): see {cur.run.logs}"
            )
            return
        if not final.complete:
            self.failed.add(cur.ckpt.step)
            self.say(f"step {cur.ckpt.step}: pool ended with {final.line()}: INCOMPLETE, retried on restart")
            return
        self.finished += 1
        self.say(f"step {cur.ckpt.step}: {final.line()}: complete in {took:.1f} s")
        point = publish(self.prefix, self.out, cur.run, self.say)
        for board in self.dashboards:
            board.log(point)

    def status_line(self) -> str:
        states = list(self.states().values())
        counts = {s: states.count(s) for s in ("done", "todo", "dropped")}
        ready = len(self.ckpts.complete)
        now = ""
        if (cur := self.current) is not None:
            now = f" | evaluating step {cur.ckpt.step}: {progress(cur.run, cur.manifest).line()}"
        return (
            f"checkpoints {ready} complete | runs {counts['done']} done, {counts['todo']} to do, "
            f"{counts['dropped']} dropped{now}"
        )


def _refusal(logs: Path) -> str | None:
    """Why the pool's workers refused the run (their input), or their model server could not load
    the checkpoint (it exits 2 on a checkpoint its policy refuses), as one line; None otherwise."""
    if refusal := first_refusal(logs):
        return one_line(refusal)
    failure = first_failure(logs) or ""
    if LOAD_REFUSED in failure:
        return "the policy cannot load it: " + failure.splitlines()[0].partition("cannot run: ")[2]
    return None


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ckpt_dir", type=Path, help="the directory the trainer saves checkpoints into")
    p.add_argument("--queue", type=Path, required=True, help="queue file of every run (as for new_run.py)")
    p.add_argument("--run-prefix", help="runs are <prefix>_step<N> (default: the directory's name)")
    p.add_argument(
        "--settle", type=float, default=30.0, metavar="S", help="seconds unchanged = complete (30)"
    )
    p.add_argument("--poll", type=float, default=2.0, metavar="S", help="seconds between looks (2)")
    p.add_argument("--nodes", type=int, help="nodes in the pool (default: the POOL_NODES knob)")
    p.add_argument(
        "--progress-every", type=float, default=30.0, metavar="S", help="seconds between status lines"
    )
    p.add_argument("--once", action="store_true", help="evaluate what is there, then exit")
    p.add_argument(
        "--idle-exit", type=float, default=0.0, metavar="S", help="exit after S s with nothing to do"
    )
    p.add_argument("--out", type=Path, help="curve and tables (default: $RUNS_ROOT/<prefix>_curve)")
    p.add_argument("--tensorboard", type=Path, metavar="DIR", help="also write TensorBoard event files here")
    p.add_argument("--wandb-project", help="also log to this W&B project")
    p.add_argument("--wandb-mode", choices=("offline", "online"), default="offline", help="(offline)")
    p.add_argument("--wandb-run-id", help="the trainer's W&B run id, resumed so the eval lands beside it")
    p.add_argument("--wandb-dir", type=Path, help="where wandb writes its files (default: --out)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.ckpt_dir.is_dir():
        print(
            f"watch: checkpoint directory {args.ckpt_dir} does not exist (or is not a directory)",
            file=sys.stderr,
        )
        return REFUSED
    if not args.queue.is_file():
        print(f"watch: queue file {args.queue} does not exist", file=sys.stderr)
        return REFUSED
    prefix = args.run_prefix or series_prefix(args.ckpt_dir)
    out = args.out or run_dir(f"{prefix}_curve")
    try:
        launch = PoolLaunch.of(Settings.from_env(os.environ), os.environ, args.nodes, args.progress_every)
    except ValueError as exc:
        print(f"watch: {one_line(exc)}", file=sys.stderr)
        return REFUSED
    watcher = Watcher(
        CheckpointDir(args.ckpt_dir, args.settle, time.monotonic), args.queue, prefix, launch, out
    )
    watcher.dashboards = dashboards_from_args(args, out, watcher.say)
    say(f"watching {args.ckpt_dir} (settle {args.settle:g} s): runs {prefix}_step<N>, {launch.launcher} pool")
    pools.stop_on_signals()
    try:
        return _loop(watcher, args)
    except WatchRefused as exc:
        print(f"watch: {exc}", file=sys.stderr)
        return REFUSED
    finally:
        pools.terminate_all()
        for board in watcher.dashboards:
            board.close()


def _loop(watcher: Watcher, args: argparse.Namespace) -> int:
    next_status = time.monotonic()
    idle_since = time.monotonic()
    while True:
        busy = watcher.step()
        now = time.monotonic()
        if now >= next_status:
            watcher.say(watcher.status_line())
            next_status = now + args.progress_every
        if busy or watcher.todo():
            idle_since = now
        elif args.once or (args.idle_exit and now - idle_since >= args.idle_exit):
            watcher.say(f"nothing left to evaluate: {watcher.status_line()}")
            return FAILED if watcher.failed else 0
        time.sleep(args.poll)


if __name__ == "__main__":
    sys.exit(run_command("watch", main))
