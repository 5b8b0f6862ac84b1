"""The checkpoint watcher (orchestrators/watch.sh) end to end on the local pool.

Each test runs the command as the docs give it, from a private snapshot of the code, with the fast
test-double benchmark and `tests/policies/ckpt_sleep` (a policy that reads its checkpoint's
config.json, so what is evaluated is a real directory the policy loads), and counts episode records:
a partial checkpoint is never a run, a deleted one is dropped with its records kept, a watcher
killed with SIGKILL and started again runs no episode twice, bad input is one line and exit 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from harness.launch.ckptscan import CheckpointDir, step_of
from support.codecopy import copy_code
from support.leftovers import leftovers, wait_for_no_leftovers

UNITS = [("s1", "t1"), ("s1", "t2")]


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_code(tmp_path_factory.mktemp("repo"))


@pytest.fixture
def env(tmp_path: Path):
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "USER", "LANG", "TMPDIR")}
    (tmp_path / "queue.txt").write_text("".join(f"{s} {t}\n" for s, t in UNITS))
    (tmp_path / "ckpts").mkdir()
    base.update(
        LAUNCHER="local", RUNS_ROOT=str(tmp_path / "runs"), BENCHMARK="tests.support.fastbench:FastBench",
        POLICY="tests/policies/ckpt_sleep", USE_EVAL_SEEDS="0", EVAL_TEST_NUM="2", RECORD_VIDEO="0",
        STAGE_ENVS="none", NODE_CACHE=str(tmp_path / "node_cache"), HEARTBEAT_S="1", LEASE_TTL="4",
        FASTBENCH_STEPS="2", FASTBENCH_STEP_MS="5", CPU_WORKERS="1", SIMS_PER_WORKER="1",
    )  # fmt: skip
    yield base
    for line in leftovers(str(tmp_path)):  # a pool a SIGKILLed watcher left behind: ours, by pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    assert wait_for_no_leftovers(str(tmp_path), 30) == []


def save(ckpts: Path, step: int, infer_ms: int = 2) -> Path:
    """A complete checkpoint, written elsewhere and renamed in (as the reference trainer saves)."""
    tmp = ckpts.parent / f"tmp_{step}"
    tmp.mkdir()
    (tmp / "config.json").write_text(json.dumps({"kind": "sleep", "infer_ms": infer_ms}))
    tmp.rename(ckpts / f"step_{step}")
    return ckpts / f"step_{step}"


def command(snapshot: Path, tmp_path: Path, *extra: str) -> list[str]:
    watch = [str(tmp_path / "ckpts"), "--queue", str(tmp_path / "queue.txt"), "--nodes", "1"]
    return ["bash", str(snapshot / "orchestrators" / "watch.sh"), *watch, "--poll", "0.3", *extra]


def start(snapshot: Path, tmp_path: Path, env: dict[str, str], *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        command(snapshot, tmp_path, *extra), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip


def watch(snapshot: Path, tmp_path: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    cmd = command(snapshot, tmp_path, *extra)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def records(run: Path) -> list[dict]:
    out = []
    for path in sorted((run / "eval_result").rglob("_metrics*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip().endswith("}")]
    return out


def trials(run: Path) -> Counter:
    return Counter((r["task"], r["seed"]) for r in records(run) if r.get("error") is None)


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_scan_hands_out_a_checkpoint_only_once_it_is_unchanged_for_the_settle_time(tmp_path: Path) -> None:
    now = [0.0]
    watched = CheckpointDir(tmp_path, settle_s=5, clock=lambda: now[0])
    growing = tmp_path / "checkpoint-300"
    growing.mkdir()
    (tmp_path / "last").mkdir()  # no step in the name: never a checkpoint
    (tmp_path / "step_100.tmp").mkdir()
    for i in range(10):  # a copy in progress: a byte every 2 s, never still for 5 s
        (growing / "model.bin").write_bytes(b"x" * (i + 1))
        assert watched.look().complete == []
        now[0] += 2
    now[0] += 2.9  # 4.9 s since the last change, seen at 18
    assert watched.look().complete == []
    now[0] += 0.2
    assert [c.step for c in watched.look().complete] == [300]
    assert watched.look().complete == []  # handed out once
    (growing / "model.bin").unlink()
    growing.rmdir()
    assert [c.step for c in watched.look().deleted] == [300]
    assert [step_of(n) for n in ("step_4000", "checkpoint-12", "77", "last", ".step_9", "s_1.tmp")] == [
        4000, 12, 77, None, None, None,
    ]  # fmt: skip


def test_a_partial_checkpoint_is_never_evaluated(snapshot: Path, env: dict[str, str], tmp_path: Path) -> None:
    """A half-copied checkpoint (config.json growing, not yet valid JSON) would be refused at run
    creation (exit 2); it is evaluated once whole, and its run holds the whole one's fingerprint."""
    ckpts = tmp_path / "ckpts"
    save(ckpts, 1000)
    partial = ckpts / "step_2000"
    partial.mkdir()
    text = json.dumps({"kind": "sleep", "infer_ms": 2})

    def copy() -> None:
        for i in range(1, len(text) + 1):
            (partial / "config.json").write_text(text[:i])
            time.sleep(4.0 / len(text))

    copier = threading.Thread(target=copy)
    copier.start()
    done = watch(snapshot, tmp_path, env, "--settle", "1.5", "--once")
    copier.join()
    assert done.returncode == 0, done.stdout + done.stderr
    runs = Path(env["RUNS_ROOT"])
    run = runs / "ckpts_step0002000"
    created = yaml.safe_load((run / "run.yaml").read_text())
    assert created["contract"]["knobs"]["CKPT_NAME"] == str(partial)
    assert (partial / "config.json").read_text() == text
    assert set(trials(run)) == {(t, s) for _, t in UNITS for s in (0, 1)}
    assert "step 2000: 4/4 episodes, 2/2 units: complete" in done.stdout
    curve = json.loads((runs / "ckpts_curve" / "curve.json").read_text())
    assert [p["step"] for p in curve["points"]] == [1000, 2000]
    assert curve["points"][1]["verdict"]["against_step"] == 1000


def test_a_checkpoint_deleted_mid_eval_is_dropped_and_its_records_kept(
    snapshot: Path, env: dict[str, str], tmp_path: Path
) -> None:
    ckpts = tmp_path / "ckpts"
    save(ckpts, 1000)
    doomed = save(ckpts, 2000, infer_ms=150)  # the newest, so the first evaluated; slow episodes
    env = {**env, "EVAL_TEST_NUM": "4"}
    proc = start(snapshot, tmp_path, env, "--settle", "0.5", "--idle-exit", "2")
    run = Path(env["RUNS_ROOT"]) / "ckpts_step0002000"
    try:
        wait_for(lambda: len(trials(run)) >= 1, 60, "the first episode of step 2000")
        for path in doomed.iterdir():
            path.unlink()
        doomed.rmdir()
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    assert "checkpoint step 2000 deleted while evaluated: pool stopped" in out
    note = json.loads((run / "watch_dropped.json").read_text())
    assert note["step"] == 2000 and note["episodes_done"] >= 1 and note["episodes_planned"] == 8
    assert len(trials(run)) >= note["episodes_done"]  # nothing lost
    assert max(trials(run).values()) == 1
    assert set(trials(Path(env["RUNS_ROOT"]) / "ckpts_step0001000")) == {
        (t, s) for _, t in UNITS for s in range(4)
    }
    curve = json.loads((Path(env["RUNS_ROOT"]) / "ckpts_curve" / "curve.json").read_text())
    assert {p["step"]: p["state"] for p in curve["points"]} == {1000: "done", 2000: "dropped"}


def test_a_watcher_killed_and_restarted_runs_nothing_twice(
    snapshot: Path, env: dict[str, str], tmp_path: Path
) -> None:
    ckpts = tmp_path / "ckpts"
    for step in (1000, 2000, 3000):
        save(ckpts, step, infer_ms=60)
    env = {**env, "EVAL_TEST_NUM": "3"}
    runs = Path(env["RUNS_ROOT"])
    proc = start(snapshot, tmp_path, env, "--settle", "0.5")
    try:
        wait_for(lambda: len(trials(runs / "ckpts_step0002000")) >= 1, 90, "step 2000 under way")
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # the watcher alone: its pool goes on, orphaned
        proc.communicate(timeout=30)
    before = {(r["task"], r["seed"], r["finished_at"]) for r in records(runs / "ckpts_step0003000")}
    again = watch(snapshot, tmp_path, env, "--settle", "0.5", "--once")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "on ckpts_step0003000" not in again.stdout  # done before the kill: no pool started on it
    after = {(r["task"], r["seed"], r["finished_at"]) for r in records(runs / "ckpts_step0003000")}
    assert after == before
    for step in (1000, 2000, 3000):
        counts = trials(runs / f"ckpts_step{step:07d}")
        assert set(counts) == {(t, s) for _, t in UNITS for s in range(3)}
        assert max(counts.values()) == 1, (step, counts)  # no episode ran twice


def test_bad_input_is_one_clear_line_and_exit_2(snapshot: Path, env: dict[str, str], tmp_path: Path) -> None:
    missing = subprocess.run(
        ["bash", str(snapshot / "orchestrators" / "watch.sh"), str(tmp_path / "nope"), "--queue",
         str(tmp_path / "queue.txt")], env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert missing.returncode == 2
    assert (
        missing.stderr
        == f"watch: checkpoint directory {tmp_path / 'nope'} does not exist (or is not a directory)\n"
    )

    ckpts = tmp_path / "ckpts"
    (ckpts / "step_500").mkdir()
    (ckpts / "step_500" / "weights.bin").write_bytes(b"0")  # no config.json: refused at creation
    lacking = watch(snapshot, tmp_path, env, "--settle", "0.3", "--once")
    assert lacking.returncode == 2, lacking.stdout + lacking.stderr
    [line] = lacking.stderr.splitlines()
    assert line.startswith(f"watch: checkpoint {ckpts / 'step_500'} (step 500): refusing to create run")
    assert "lacks config.json" in line

    (ckpts / "step_500" / "config.json").write_text('{"kind": "other"}')  # the policy's load refuses it
    refused = watch(snapshot, tmp_path, env, "--settle", "0.3", "--once")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"watch: checkpoint {ckpts / 'step_500'} (step 500): the policy cannot load it:")
    assert "not a ckpt_sleep checkpoint (kind 'other')" in line


def test_a_failing_dashboard_never_fails_the_eval_nor_shows_a_secret(
    env: dict[str, str], tmp_path: Path
) -> None:
    """TensorBoard on, W&B on but unable to start (its dir is a file); a key in `.env`, as a user
    keeps it. The eval completes (exit 0), W&B's failure is one warning, TensorBoard's event files
    hold the point, and the key is in no output and no file written."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    secret = "wandb_v1_SECRETKEY0123456789abcdef"
    repo = copy_code(tmp_path / "repo")
    (repo / ".env").write_text(f"WANDB_API_KEY={secret}\n")
    save(tmp_path / "ckpts", 1000)
    (tmp_path / "not_a_dir").write_text("")
    extra = (
        "--tensorboard",
        str(tmp_path / "tb"),
        "--wandb-project",
        "p",
        "--wandb-dir",
        str(tmp_path / "not_a_dir"),
    )
    done = watch(repo, tmp_path, env, "--settle", "0.3", "--once", *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "step 1000: 4/4 episodes, 2/2 units: complete" in done.stdout
    failed = f"FileExistsError: [Errno 17] File exists: '{tmp_path / 'not_a_dir'}'"
    assert f"warning: wandb logger: step 1000 failed: {failed}" in done.stdout
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("eval/SR")] == [(1000, 0.5)]  # seeds 1 of 0, 1
    assert secret not in done.stdout + done.stderr
    written = [p for d in ("runs", "tb") for p in (tmp_path / d).rglob("*") if p.is_file()]
    assert any(p.name == "curve.json" for p in written)
    assert not [p for p in written if secret.encode() in p.read_bytes()]
