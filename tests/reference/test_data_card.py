"""Train/eval disjointness: the shipped checkpoints' training seeds never meet the shipped eval bank."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.referencekit import BANK, EARLY, SHIPPED
from support.wirekit import REPO
from training.datacard import check_disjoint, eval_seeds, overlap, read_card


@pytest.mark.parametrize("ckpt", [SHIPPED, EARLY], ids=["final", "early"])
def test_shipped_training_seeds_are_disjoint_from_the_eval_bank(ckpt: Path) -> None:
    card = read_card(ckpt / "data_card.json")
    start, stop = card["seed_range"]
    assert overlap((start, stop), BANK) == []
    bank = eval_seeds(BANK)
    assert set(card["tasks"]) == set(bank)  # one checkpoint for every task of the bank
    for task, seeds in card["demos"].items():
        assert seeds and all(start <= s < stop for s in seeds), task
        assert not set(seeds) & bank[task], task
    assert card["num_demos"] == sum(len(s) for s in card["demos"].values())


def test_an_overlapping_range_is_refused_naming_the_bank(tmp_path: Path) -> None:
    (tmp_path / "PushCube").mkdir()
    (tmp_path / "PushCube" / "table_clean.txt").write_text("3 50 70\n")
    check_disjoint((0, 3), tmp_path)
    check_disjoint((71, 200), tmp_path)
    with pytest.raises(ValueError, match=r"overlap the eval bank .*PushCube seed 50"):
        check_disjoint((40, 60), tmp_path)


def test_collector_refuses_an_overlapping_seed_range_before_running(tmp_path: Path) -> None:
    cmd = [sys.executable, str(REPO / "scripts" / "collect_training_data.py"), "--out", str(tmp_path / "d"),
           "--start", "5", "--num", "2", "--max-candidates", "4"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert "overlap the eval bank seeds/maniskill" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "d").exists()
