"""Seed-bank precollection: selection logic, resume, and regeneration identical to the shipped bank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.launch.precollect import Pair

ROOT = Path(__file__).resolve().parents[2]
BANK = ROOT / "seeds" / "maniskill"


def _pair(verdicts: dict[int, bool], num: int = 2, stop: int = 6) -> Pair:
    pair = Pair("T", "clean", "table", Path("/nonexistent"), num, 0, stop)
    pair.verdicts = {seed: {"seed": seed, "ok": ok} for seed, ok in verdicts.items()}
    return pair


def test_bank_is_the_first_accepted_seeds_in_seed_order() -> None:
    assert _pair({0: False, 1: True, 3: True}).accepted() is None  # seed 2 still undecided
    assert _pair({0: False, 1: True, 2: False, 3: True}).accepted() == [1, 3]
    assert _pair({0: True, 1: True}).accepted() == [0, 1]  # later seeds do not matter
    assert _pair({s: s == 4 for s in range(6)}).accepted() == [4]  # candidates exhausted: short bank


def test_take_skips_judged_seeds_and_stops_when_decided() -> None:
    pair = _pair({0: True, 2: False})
    assert pair.take(3) == [1, 3, 4]
    pair = _pair({0: True, 1: True})
    assert pair.take(3) == []


def test_shipped_queue_and_banks_are_consistent() -> None:
    units = (BANK.parent / "maniskill_queue.txt").read_text().split("\n")
    tasks = [line.split()[1] for line in units if line.strip()]
    assert len(tasks) >= 6
    for task in tasks:
        for config in ("table_clean", "table_clutter3"):
            seeds = [int(s) for s in (BANK / task / f"{config}.txt").read_text().split()]
            assert len(seeds) == 10
            with np.load(BANK / task / f"{config}.traces.npz") as npz:
                assert sorted(npz.files) == sorted(f"seed{s}" for s in seeds)
                assert all(npz[f"seed{s}"].shape[1] == 10 for s in seeds)


def _precollect(root: Path, *extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(ROOT / "scripts" / "precollect_eval_seeds.py"), "--root", str(root)]
    argv += ["--tasks", "PickCube", "--num", "2", "--jobs", "1", *extra]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.sim
def test_tiny_range_regenerates_the_shipped_bank(tmp_path: Path) -> None:
    result = _precollect(tmp_path / "bank", "--max-candidates", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "bank" / "PickCube" / "table_clean.txt").read_text() == "0 1\n"
    assert (tmp_path / "bank_queue.txt").read_text() == "table PickCube\n"
    assert not (tmp_path / "bank" / ".precollect").exists()
    with (
        np.load(tmp_path / "bank" / "PickCube" / "table_clean.traces.npz") as ours,
        np.load(BANK / "PickCube" / "table_clean.traces.npz") as shipped,
    ):
        for name in ("seed0", "seed1"):
            np.testing.assert_array_equal(ours[name], shipped[name])


@pytest.mark.sim
def test_resume_trusts_recorded_verdicts(tmp_path: Path) -> None:
    scratch = tmp_path / "bank" / ".precollect" / "PickCube" / "table_clean"
    scratch.mkdir(parents=True)
    verdict = {"seed": 0, "ok": False, "reason": "recorded by an interrupted run", "steps": 0}
    (scratch / "seed0.json").write_text(json.dumps(verdict))
    result = _precollect(tmp_path / "bank", "--max-candidates", "3", "--start", "0")
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "bank" / "PickCube" / "table_clean.txt").read_text() == "1 2\n"
    rerun = _precollect(tmp_path / "bank", "--max-candidates", "3")
    assert rerun.returncode == 0 and "[" not in rerun.stdout.split("wrote")[0]  # nothing judged again
