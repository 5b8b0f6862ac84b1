"""Issue 59: precollect leaves out seeds whose success holds before the first action, lists them
beside the bank, and a bank that holds one is named when a run is created."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.episode.bench import ExpertResult
from harness.launch import precollect
from harness.launch.precollect import NOT_A_TRIAL, Pair, banked_not_trials, not_trials_file, write_not_trials


class Episode:
    def __init__(self, seed: int) -> None:
        self.seed, self.steps = seed, 0

    def apply(self, action: np.ndarray) -> None:
        self.steps += 1

    def success(self) -> bool:
        return self.seed == 3 or self.steps >= 2  # seed 3: solved as built

    def collided(self) -> bool:
        return False

    def close(self) -> None:
        pass


class Bench:
    """An expert that solves every seed and never checks the start (unlike ManiSkill's)."""

    def make_episode(self, task: str, bench_config: str, seed: int, *, render: bool = True) -> Any:
        return Episode(seed)

    def expert(self, task: str, bench_config: str, seed: int) -> ExpertResult:
        return ExpertResult(True, "ok", np.zeros((3, 10), np.float32), 3)


def test_judge_leaves_out_a_seed_solved_before_the_first_action(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precollect, "_BENCH", Bench())
    assert precollect.judge_seed("unused", "T", "clean", 2)["ok"]
    verdict = precollect.judge_seed("unused", "T", "clean", 3)
    assert (verdict["ok"], verdict["reason"]) == (False, NOT_A_TRIAL)


def test_not_trials_are_listed_beside_the_bank_and_named(tmp_path: Path) -> None:
    pair = Pair("T", "clean", "table", tmp_path, 2, 0, 6)
    pair.verdicts = {
        0: {"seed": 0, "ok": True, "reason": "ok"},
        1: {"seed": 1, "ok": False, "reason": NOT_A_TRIAL},
        2: {"seed": 2, "ok": False, "reason": "succeeds with no action"},  # the ManiSkill expert's
        3: {"seed": 3, "ok": False, "reason": "planner failed"},
    }
    pair.bank_file.parent.mkdir(parents=True)
    write_not_trials(pair)
    listed = json.loads(not_trials_file(pair.bank_file).read_text())
    assert sorted(listed) == ["1", "2"]
    assert not_trials_file(pair.bank_file).name == "table_clean.not_trials.json"
    assert banked_not_trials({pair.bank_file: [0, 4]}) == []  # a bank precollect wrote
    [line] = banked_not_trials({pair.bank_file: [0, 2, 4]})  # an older or hand-edited one
    assert str(pair.bank_file) in line and "seed(s) 2 " in line and "precollect" in line
    pair.verdicts = {0: pair.verdicts[0]}
    write_not_trials(pair)
    assert not not_trials_file(pair.bank_file).exists()


def test_run_creation_names_a_bank_holding_a_not_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.launch.newrun import check_runnable

    bank = tmp_path / "bank" / "t1" / "s1_clean.txt"
    bank.parent.mkdir(parents=True)
    bank.write_text("0 1 2 3\n")
    (tmp_path / "queue.txt").write_text("s1 t1\n")
    env = {"POLICY": "hold", "BENCHMARK": "tests.support.fastbench:FastBench", "USE_EVAL_SEEDS": "1",
           "SEEDS_ROOT": str(tmp_path / "bank"), "BENCH_CONFIG": "clean", "EVAL_TEST_NUM": "4"}  # fmt: skip
    check_runnable(tmp_path / "queue.txt", env)
    assert "not_trials" not in capsys.readouterr().err
    not_trials_file(bank).write_text(json.dumps({"2": NOT_A_TRIAL, "7": NOT_A_TRIAL}))
    check_runnable(tmp_path / "queue.txt", env)  # still runnable: those episodes count apart
    err = capsys.readouterr().err
    assert f"warning: seed bank file {bank} holds seed(s) 2 whose success holds before" in err
