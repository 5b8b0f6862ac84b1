"""The watcher's dashboards (harness.launch.dashboards), read back with each library's own reader:
TensorBoard's EventAccumulator over the event files, wandb's offline run files (its DataStore and
protobuf records) for a run id the "trainer" opened first. A logger that fails (an unwritable
directory, an exception, a hang) is one warning and never raises, and a secret of the environment
never shows in it."""

from __future__ import annotations

import glob
import json
import time
from pathlib import Path

import pytest

from harness.launch.dashboards import Guarded, TensorBoard, WandB, scalars

POINT = {
    "step": 2000,
    "run": "tr_step0002000",
    "checkpoint": "/ckpts/step_2000",
    "state": "done",
    "interval": "Wilson 95%",
    "tasks": {
        "s1/t1": {
            "sr": {"k": 3, "n": 4, "rate": 0.75, "lo": 0.3, "hi": 0.95},
            "hsr": {"k": 2, "n": 4, "rate": 0.5, "lo": 0.15, "hi": 0.85},
        },
    },
    "total": {
        "sr": {"k": 3, "n": 4, "rate": 0.75, "lo": 0.3, "hi": 0.95},
        "hsr": {"k": 2, "n": 4, "rate": 0.5, "lo": 0.15, "hi": 0.85},
    },
    "verdict": {"verdict": "better", "against_step": 1000, "diff_sr": 0.5, "diff_lo": 0.1, "diff_hi": 0.8},
    "videos": [],
}


def test_tensorboard_event_files_hold_the_point(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    said: list[str] = []
    board = TensorBoard(tmp_path / "tb", said.append)
    board.log(POINT)
    board.log({**POINT, "step": 1000, "verdict": None})  # an older checkpoint, logged later
    board.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert said == []
    sr = {e.step: e.value for e in events.Scalars("eval/SR")}
    assert sr == pytest.approx({1000: 0.75, 2000: 0.75})
    assert events.Scalars("eval/SR_lo")[0].value == pytest.approx(0.3)
    assert events.Scalars("eval/s1/t1/HSR_hi")[0].value == pytest.approx(0.85)
    assert [e.step for e in events.Scalars("eval/dSR_vs_best")] == [2000]


def wandb_records(root: Path) -> list[tuple[str, dict]]:
    """(run id, history row) of every history record in the offline run files under `root`."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    rows = []
    for path in sorted(glob.glob(str(root / "wandb" / "offline-run-*" / "*.wandb"))):
        store = datastore.DataStore()
        store.open_for_scan(path)
        run_id = None
        while (data := store.scan_data()) is not None:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run_id = record.run.run_id
            elif kind == "history":
                items = record.history.item  # a key is in `key`, or in `nested_key` (wandb 0.21: always)
                rows.append(
                    (run_id, {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
                )
    return rows


def test_wandb_offline_resumes_the_trainers_run_and_logs_by_train_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wandb

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    trainer = wandb.init(project="ref", id="trainer-abc", mode="offline", dir=str(tmp_path))
    trainer.log({"train/loss": 0.5}, step=2500)  # the trainer is past the checkpoint evaluated
    trainer.finish()
    time.sleep(1.1)  # offline run dirs are named to the second: two inits of one id in a second share one
    said: list[str] = []
    board = WandB("ref", "trainer-abc", tmp_path, said.append)
    board.log(POINT)
    board.close()
    assert said == []
    rows = settled_records(tmp_path)
    evals = [row for run_id, row in rows if run_id == "trainer-abc" and "eval/SR" in row]
    assert len(evals) == 1
    assert evals[0]["eval/train_step"] == 2000 and evals[0]["eval/SR"] == pytest.approx(0.75)
    assert evals[0]["eval/SR_lo"] == pytest.approx(0.3) and evals[0]["eval/dSR_vs_best"] == pytest.approx(0.5)
    assert evals[0]["eval/s1/t1/HSR"] == pytest.approx(0.5)
    assert any(row.get("train/loss") == 0.5 for run_id, row in rows if run_id == "trainer-abc")


def settled_records(root: Path, timeout: float = 30.0) -> list[tuple[str, dict]]:
    """`wandb_records` once both runs' files are whole: wandb's service may still be writing a run's
    file (empty, so far: "header is 0 bytes") after `finish()` returned."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            rows = wandb_records(root)
            if any("eval/SR" in row for _, row in rows) and any("train/loss" in row for _, row in rows):
                return rows
        except AssertionError:  # DataStore's own check of a file not yet written
            pass
        if time.monotonic() > deadline:
            return wandb_records(root)
        time.sleep(0.3)


class Exploding(Guarded):
    name = "exploding"

    def __init__(self, say, secret: str, hang_s: float = 0.0, limit_s: float = 5.0) -> None:
        super().__init__(say, limit_s)
        self.secret, self.hang_s = secret, hang_s

    def _log(self, point: dict) -> None:
        time.sleep(self.hang_s)
        raise ConnectionError(f"401 for api key {self.secret}")


def test_a_failing_logger_is_a_warning_with_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "wandb_v1_SECRETSECRET0123456789"
    monkeypatch.setenv("WANDB_API_KEY", secret)
    said: list[str] = []
    Exploding(said.append, secret).log(POINT)
    assert said == ["warning: exploding logger: step 2000 failed: ConnectionError: 401 for api key ***"]
    said.clear()
    hung = Exploding(said.append, secret, hang_s=3, limit_s=0.5)
    began = time.monotonic()
    hung.log(POINT)
    hung.log(POINT)  # switched off after the first hang: returns at once
    assert time.monotonic() - began < 2
    assert said == ["warning: exploding logger: step 2000 took over 0.5 s; exploding logging off"]
    said.clear()
    (tmp_path / "file").write_text("")  # a logdir / wandb dir that cannot be created
    for board in (
        TensorBoard(tmp_path / "file" / "tb", said.append),
        WandB("p", None, tmp_path / "file", said.append),
    ):
        board.log(POINT)
        board.close()
    assert len(said) == 2 and all(line.startswith("warning: ") and secret not in line for line in said), said


def test_scalars_name_every_rate_with_its_interval() -> None:
    names = set(scalars(POINT))
    for prefix in ("eval", "eval/s1/t1"):
        for metric in ("SR", "HSR"):
            assert {f"{prefix}/{metric}{s}" for s in ("", "_lo", "_hi", "_n")} <= names
    assert {"eval/train_step", "eval/dSR_vs_best", "eval/dSR_vs_best_lo", "eval/dSR_vs_best_hi"} <= names
