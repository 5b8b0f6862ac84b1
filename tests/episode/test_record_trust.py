"""Issue 59 on the sim side: every record carries its policy round trips (count, p50/p95 ms); an
episode whose success holds before the policy's first action is recorded as not a trial."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.config.settings import Settings
from harness.episode.records import RecordError, check_record, is_trial
from harness.episode.simclient import SimAssignment, SimClient, latency_ms


class Episode:
    def __init__(self, succeed_at: int | None) -> None:
        self.instruction, self.step_limit, self.action_dim = "do it", 6, 10
        self.spec = {"benchmark": "scripted", "action_dim": 10, "cameras": ["cam"]}
        self.succeed_at, self.steps = succeed_at, 0

    def observe(self) -> dict[str, Any]:
        return {"images": {"cam": np.zeros((4, 4, 3), np.uint8)}, "proprio": np.zeros(10, np.float32)}

    def apply(self, action: np.ndarray) -> None:
        self.steps += 1

    def success(self) -> bool:
        return self.succeed_at is not None and self.steps >= self.succeed_at

    def collided(self) -> bool:
        return False

    def video_frame(self) -> np.ndarray:
        return np.zeros((4, 4, 3), np.uint8)

    def close(self) -> None:
        pass


class Bench:
    version = "scripted==1"

    def __init__(self, plan: dict[int, int | None]) -> None:
        self.plan = plan

    def make_episode(self, task: str, bench_config: str, seed: int, *, render: bool = True) -> Episode:
        return Episode(self.plan[seed])


class Policy:
    def __init__(self) -> None:
        self.infers = 0

    def hello(self, spec: dict[str, Any]) -> dict[str, Any]:
        return {"policy": "scripted", "ckpt": "c1", "action_dim": 10}

    def reset(self, task: str, task_config: str, instruction: str, seed: int) -> None:
        pass

    def infer(self, obs: dict[str, Any], step: int) -> np.ndarray:
        self.infers += 1
        return np.zeros((2, 10), np.float32)


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: dict[int, int | None]) -> tuple[list, Policy]:
    monkeypatch.setenv("RECORD_VIDEO", "0")
    monkeypatch.setenv("BENCH_CONFIG", "clean")
    policy = Policy()
    assignment = SimAssignment(tmp_path / "run", "table", "T", list(plan), "w1")
    return SimClient(Bench(plan), policy, assignment, Settings.from_env(os.environ)).run(
        lambda line: None
    ), policy


def test_nearest_rank_percentiles() -> None:
    assert latency_ms([], 50) is None
    assert latency_ms([7.0], 95) == 7.0
    times = [float(i) for i in range(1, 101)]  # 1..100 ms
    assert (latency_ms(times, 50), latency_ms(times, 95)) == (50.0, 95.0)
    assert latency_ms([3.0, 1.0, 2.0], 50) == 2.0  # an observed round trip, never interpolated


def test_every_record_carries_its_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs, policy = _run(tmp_path, monkeypatch, {0: 3, 1: None})
    by_seed = {r["seed"]: r for r in recs}
    assert by_seed[0]["infer_calls"] == 2  # chunks of 2: actions 1-2, then 3 succeeds
    assert by_seed[1]["infer_calls"] == 3  # 6 steps, no success
    assert policy.infers == 5
    for r in recs:
        assert 0 <= r["infer_p50_ms"] <= r["infer_p95_ms"]
        check_record(r)


def test_old_records_without_latency_still_check_and_bad_values_do_not() -> None:
    from support.results_fixtures import record

    old = record("table", "T", 0, True)
    check_record(old)  # no infer_* fields: an older record
    with pytest.raises(RecordError, match="infer_p95_ms"):
        check_record({**old, "infer_calls": 3, "infer_p50_ms": 1.0, "infer_p95_ms": -2.0})
    assert is_trial(old)


def test_each_record_names_the_node_fingerprint_stored_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.episode import nodeprint

    monkeypatch.setenv("HF_TOKEN", "hf_secret_never_in_a_fingerprint")
    recs, _ = _run(tmp_path, monkeypatch, {0: 3, 1: None, 2: 1})
    ids = {r["fingerprint"] for r in recs}
    assert len(ids) == 1 and nodeprint.is_id(next(iter(ids)))
    [path] = list((tmp_path / "run" / "fingerprints").iterdir())  # one file, no temporary left
    assert path.name == f"{next(iter(ids))}.json"
    text = path.read_text()
    doc = json.loads(text)
    assert nodeprint.fingerprint_id(doc) == path.stem  # content-addressed
    assert doc["sim_side"]["cpu"]["model"] and doc["sim_side"]["os"]["kernel"]
    assert doc["sim_side"]["numpy"]["version"] == np.__version__
    assert "numpy" in doc["sim_side"]["sim"] and doc["model_side"] is None  # this policy sent no stack
    assert "hf_secret" not in text and "HF_TOKEN" not in text


def test_store_is_content_addressed_and_idempotent(tmp_path: Path) -> None:
    from harness.episode import nodeprint

    doc = {"sim_side": {"cpu": {"model": "X"}}, "model_side": {"gpus": ["H100"]}}
    ident = nodeprint.store(tmp_path, doc)
    assert nodeprint.store(tmp_path, dict(reversed(doc.items()))) == ident  # key order does not matter
    other = nodeprint.store(tmp_path, {**doc, "model_side": {"gpus": ["A100"]}})
    assert other != ident
    assert sorted(p.name for p in (tmp_path / "fingerprints").iterdir()) == sorted(
        [f"{ident}.json", f"{other}.json"]
    )
    assert nodeprint.read_all(tmp_path)[ident] == doc
    assert "H100" in nodeprint.describe(doc) and "before fingerprints" in nodeprint.describe(None)


def test_model_stack_names_torch_only_when_loaded() -> None:
    import sys

    from harness.model.policyload import model_stack

    stack = model_stack()
    assert stack["numpy"] == np.__version__ and isinstance(stack["gpus"], list)
    assert ("torch" in stack) == ("torch" in sys.modules)


def test_success_before_the_first_action_is_recorded_invalid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.config.rundir import RunDir
    from harness.episode.records import is_invalid, read_tree
    from harness.episode.simclient import SUCCESS_AT_RESET
    from harness.queue.units import Unit
    from harness.worker.unit_records import finished_seeds

    recs, policy = _run(tmp_path, monkeypatch, {0: 0, 1: 3})
    by_seed = {r["seed"]: r for r in recs}
    invalid = by_seed[0]
    assert invalid["invalid"] == SUCCESS_AT_RESET and invalid["error"] is None
    assert (invalid["success"], invalid["hard_success"], invalid["steps"]) == (False, False, 0)
    assert invalid["infer_calls"] == 0 and invalid["infer_p50_ms"] is None
    assert is_invalid(invalid) and not is_trial(invalid)
    assert by_seed[1]["invalid"] is None and is_trial(by_seed[1]) and by_seed[1]["success"]
    assert policy.infers == 2  # the policy never ran on seed 0
    found = read_tree(RunDir(tmp_path / "run").results)
    unit = Unit("table", "T", "table_clean", 0, 2, (0, 1))
    assert finished_seeds(found, unit) == {0, 1}  # an invalid seed is not run again: it would be again
    with pytest.raises(RecordError, match="invalid is set but success is true"):
        check_record({**invalid, "success": True})
