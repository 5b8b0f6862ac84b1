"""A run dir without its run.yaml is an error, never "no contract": reading the manifest decides,
not an exists() probe (which a stale NFS negative lookup answers "no", so that the contract check
was skipped and the units were planned from whatever knobs the launch had). Each refusal names the
missing file and says how a run is created."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.manifest import ManifestError
from harness.config.rundir import RunDir
from harness.episode.records import read_tree
from harness.runqueue import run_units
from support.poolkit import make_run, pool_env, run_worker

HOW = "scripts/new_run.py"


@pytest.fixture
def hand_made(tmp_path: Path) -> RunDir:
    """A queue file in a run dir that was never created (no run.yaml)."""
    return make_run(tmp_path / "run", [("s", "t0"), ("s", "t1")])


def test_units_are_never_planned_from_the_knobs(hand_made: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USE_EVAL_SEEDS", "0")  # the knobs alone could plan these units: they must not
    with pytest.raises(ManifestError) as refused:
        run_units(hand_made)
    assert str(hand_made.manifest) in str(refused.value) and HOW in str(refused.value)


def test_a_worker_refuses_a_run_dir_without_its_manifest(hand_made: RunDir, tmp_path: Path) -> None:
    env = pool_env(hand_made, create=False)
    log = tmp_path / "w0.log"
    assert run_worker(env, log) == 2, log.read_text()
    text = log.read_text()
    assert f"refusing to run: {hand_made.manifest} does not exist" in text and HOW in text, text
    assert "without a contract check" not in text and "Traceback" not in text
    assert read_tree(hand_made.results).records == {}  # not one episode outside a contract
