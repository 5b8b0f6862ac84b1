"""Pre-validating seed banks: the first N seeds an expert solves, with the expert's ee6d trace.

A candidate seed is accepted when (1) it does not succeed with no action, (2) the benchmark's expert
solves it within the task's step limit, and (3) replaying the expert's ee6d trace through the
benchmark's own episode (the eval's action path, without rendering) also succeeds before the trace
ends. (1) is checked on the eval's own episode too, whatever the benchmark's expert does: an episode
whose success holds before the first action is no trial of a policy (the sim client records it as
`invalid`). The seeds found so are listed beside the bank, `<task_config>.not_trials.json`, and a run
created on a bank that holds one of them names it (`harness.launch.newrun`).
(3) is what makes the `replay` policy a check of the whole action path: conversion, chunking,
transport. Every verdict depends only on (task, config, seed), so the bank is the same whatever the
parallelism or the order of completion, and a rerun regenerates it byte for byte.

Per-seed verdicts are kept under `<root>/.precollect/` while a bank is incomplete, so an interrupted
run resumes where it stopped; they are removed once the bank is written.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import zipfile
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from io import BytesIO
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.rundir import task_config_name
from harness.config.settings import Settings
from harness.episode.bench import Benchmark, load_benchmark

_BENCH: Benchmark | None = None
NOT_A_TRIAL = "succeeds before the first action (no trial of a policy)"
NOT_TRIAL_REASONS = (NOT_A_TRIAL, "succeeds with no action")  # ours, and the ManiSkill expert's wording


@dataclass
class Pair:
    """One (task, task_config) bank being built."""

    task: str
    bench_config: str
    scene: str
    root: Path
    num: int
    start: int
    stop: int  # first seed not to try
    verdicts: dict[int, dict[str, Any]] = field(default_factory=dict)
    next_seed: int = 0

    @property
    def task_config(self) -> str:
        return task_config_name(self.scene, self.bench_config)

    @property
    def bank_file(self) -> Path:
        return self.root / self.task / f"{self.task_config}.txt"

    @property
    def traces_file(self) -> Path:
        return self.root / self.task / f"{self.task_config}.traces.npz"

    @property
    def scratch(self) -> Path:
        return self.root / ".precollect" / self.task / self.task_config

    def accepted(self) -> list[int] | None:
        """The first `num` accepted seeds once every seed before the last of them has a verdict."""
        found = []
        for seed in range(self.start, self.stop):
            verdict = self.verdicts.get(seed)
            if verdict is None:
                return None
            if verdict["ok"]:
                found.append(seed)
                if len(found) == self.num:
                    return found
        return found  # candidates exhausted: fewer than num

    def take(self, limit: int) -> list[int]:
        """Up to `limit` more seeds to judge, in seed order, while the bank is still undecided."""
        seeds: list[int] = []
        while len(seeds) < limit and self.next_seed < self.stop and self.accepted() is None:
            if self.next_seed not in self.verdicts:
                seeds.append(self.next_seed)
            self.next_seed += 1
        return seeds

    def ok_count(self) -> int:
        return min(self.num, sum(1 for v in self.verdicts.values() if v["ok"]))


def judge_seed(bench_spec: str, task: str, bench_config: str, seed: int) -> dict[str, Any]:
    """Run in a worker process: the verdict on one seed, with the ee6d trace when accepted."""
    global _BENCH
    if _BENCH is None:
        _BENCH = load_benchmark(bench_spec, Settings.from_env(os.environ))  # this pool process's own
    result = _BENCH.expert(task, bench_config, seed)
    verdict: dict[str, Any] = {"seed": seed, "ok": False, "reason": result.reason, "steps": result.steps}
    if not result.solved:
        return verdict
    episode = _BENCH.make_episode(task, bench_config, seed, render=False)
    try:
        if episode.success():
            verdict["reason"] = NOT_A_TRIAL
            return verdict
        for step, action in enumerate(result.actions, start=1):
            episode.apply(action)
            if episode.success():
                verdict.update(ok=True, reason="ok", replay_steps=step, collided=episode.collided())
                verdict["trace"] = result.actions
                return verdict
    finally:
        episode.close()
    verdict["reason"] = "replay of the ee6d trace does not succeed"
    return verdict


def load_scratch(pair: Pair) -> None:
    for path in sorted(pair.scratch.glob("seed*.json")):
        verdict = json.loads(path.read_text())
        if verdict["ok"] and not path.with_suffix(".npy").exists():
            continue  # trace lost: judge again
        pair.verdicts[int(verdict["seed"])] = verdict
    pair.next_seed = pair.start


def save_verdict(pair: Pair, verdict: dict[str, Any]) -> None:
    pair.scratch.mkdir(parents=True, exist_ok=True)
    trace = verdict.pop("trace", None)
    if trace is not None:
        np.save(pair.scratch / f"seed{verdict['seed']}.npy", np.asarray(trace, dtype=np.float32))
    path = pair.scratch / f"seed{verdict['seed']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(verdict, sort_keys=True))
    tmp.replace(path)
    pair.verdicts[int(verdict["seed"])] = verdict


def write_bank(pair: Pair, seeds: list[int]) -> None:
    """The bank file and a byte-reproducible traces archive (fixed zip timestamps and order)."""
    pair.bank_file.parent.mkdir(parents=True, exist_ok=True)
    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for seed in seeds:
            array = np.load(pair.scratch / f"seed{seed}.npy")
            member = BytesIO()
            np.lib.format.write_array(
                member, np.ascontiguousarray(array, dtype=np.float32), allow_pickle=False
            )
            info = zipfile.ZipInfo(f"seed{seed}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, member.getvalue())
    _atomic_write(pair.traces_file, buffer.getvalue())
    _atomic_write(pair.bank_file, (" ".join(str(s) for s in seeds) + "\n").encode())


def not_trials_file(bank_file: Path) -> Path:
    """Beside `<task_config>.txt`: the seeds precollect found succeeding before the first action."""
    return bank_file.with_name(bank_file.name.removesuffix(".txt") + ".not_trials.json")


def write_not_trials(pair: Pair) -> None:
    """List the judged seeds that are no trial of a policy (none: no file)."""
    verdicts = sorted(pair.verdicts.items())
    found = {str(seed): v["reason"] for seed, v in verdicts if v.get("reason") in NOT_TRIAL_REASONS}
    path = not_trials_file(pair.bank_file)
    if found:
        _atomic_write(path, (json.dumps(found, indent=1) + "\n").encode())
    else:
        path.unlink(missing_ok=True)


def banked_not_trials(bank_files: dict[Path, list[int]]) -> list[str]:
    """One line per bank file that holds a seed listed in its not-trials file."""
    lines = []
    for bank, seeds in bank_files.items():
        try:
            listed = json.loads(not_trials_file(bank).read_text())
        except (OSError, ValueError):
            continue
        if bad := [s for s in seeds if str(s) in listed]:
            lines.append(
                f"seed bank file {bank} holds seed(s) {', '.join(map(str, bad))} whose success holds before "
                f"the first action ({not_trials_file(bank).name}): they will be recorded as invalid, not as "
                "trials; rebuild the bank with scripts/precollect_eval_seeds.py to leave them out"
            )
    return lines


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def bank_complete(pair: Pair) -> bool:
    if not (pair.bank_file.exists() and pair.traces_file.exists()):
        return False
    return len(pair.bank_file.read_text().split()) >= pair.num


def run_pairs(
    pairs: list[Pair], bench_spec: str, processes: int, report: Callable[[str], None] = print
) -> dict[tuple[str, str], list[int]]:
    """Judge seeds over `processes` processes until every pair has its bank; returns its seeds."""
    todo = [p for p in pairs if not bank_complete(p)]
    banks = {(p.task, p.task_config): p.bank_file.read_text().split() for p in pairs if p not in todo}
    for pair in todo:
        load_scratch(pair)
    active, total = list(todo), sum(p.num for p in todo)
    running: dict[Future, Pair] = {}
    with ProcessPoolExecutor(max_workers=processes, mp_context=get_context("spawn")) as pool:
        while True:
            _finish_ready(todo, banks, report)
            for pair in todo:
                for seed in pair.take(2 * processes - len(running)):
                    running[pool.submit(judge_seed, bench_spec, pair.task, pair.bench_config, seed)] = pair
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                pair = running.pop(future)
                verdict = future.result()
                if pair not in todo:
                    continue  # a look-ahead seed of a bank already written
                save_verdict(pair, verdict)
                got = sum(p.ok_count() for p in active)
                report(
                    f"[{got}/{total}] {pair.task} {pair.task_config} seed {verdict['seed']}: "
                    f"{verdict['reason']} ({verdict['steps']} expert steps)"
                )
    if not todo:
        shutil.rmtree(pairs[0].root / ".precollect", ignore_errors=True)
    return {key: [int(s) for s in seeds] for key, seeds in banks.items()}


def _finish_ready(todo: list[Pair], banks: dict[tuple[str, str], Any], report: Callable[[str], None]) -> None:
    for pair in list(todo):
        seeds = pair.accepted()
        if seeds is None:
            continue
        write_bank(pair, seeds)
        write_not_trials(pair)
        shutil.rmtree(pair.scratch, ignore_errors=True)
        banks[(pair.task, pair.task_config)] = seeds
        todo.remove(pair)
        short = (
            f" (only {len(seeds)} of {pair.num} in seeds {pair.start}..{pair.stop - 1})"
            if len(seeds) < pair.num
            else ""
        )
        report(f"wrote {pair.bank_file} : {len(seeds)} seeds{short}")
        if short:
            print(f"warning: {pair.task} {pair.task_config}{short}", file=sys.stderr)


def write_queue(path: Path, scene: str, tasks: list[str]) -> None:
    """A queue file of `<scene> <task>` units, one a line."""
    _atomic_write(path, "".join(f"{scene} {task}\n" for task in tasks).encode())
