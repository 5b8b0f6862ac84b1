"""A fill-in is held to the benchmark's seed space, as run creation is: raising a LIBERO run's
EVAL_TEST_NUM past its 50 init states is refused before run.yaml changes or any pool starts (it used
to be recorded, and its workers then failed on init state 50). No episode runs here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.poolkit import REPO

TASK = "pick up the alphabet soup and place it in the basket"


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), EVAL_ROOT=str(REPO), BUNDLE=str(REPO))
    env["RUNS_ROOT"] = str(tmp_path)
    env.update(BENCHMARK="libero", BENCH_CONFIG="libero_object", POLICY="libero_oracle", USE_EVAL_SEEDS="0")
    env.update(BENCH_PARAMS="{privileged_state: true}", LAUNCHER="local", POOL_NODES="1")
    env.pop("ACTION_CONVENTION", None)
    return env


def test_a_fillin_past_libero_init_states_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "queue.txt").write_text(f"libero {TASK}\n")
    env = _env(tmp_path)
    python = sys.executable
    created = subprocess.run(
        [python, str(REPO / "scripts" / "new_run.py"), "r", "--queue", str(tmp_path / "queue.txt")],
        env={**env, "EVAL_TEST_NUM": "48"}, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert created.returncode == 0, created.stdout + created.stderr
    assert "seeds 0.. (USE_EVAL_SEEDS=0)" in created.stdout  # not a seed bank it never reads
    manifest = tmp_path / "r" / "run.yaml"
    before = manifest.read_bytes()

    fillin = subprocess.run(
        ["bash", str(REPO / "orchestrators" / "fillin.sh"), "r", "--test-num", "51"],
        env=env, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert fillin.returncode == 2, fillin.stdout + fillin.stderr
    assert f"unit 'libero {TASK}': seed(s) [50] (EVAL_TEST_NUM=51) are outside" in fillin.stderr
    assert "0..49" in fillin.stderr and "Traceback" not in fillin.stderr
    assert manifest.read_bytes() == before
    assert not list((tmp_path / "r" / "eval_result").rglob("*.jsonl"))

    within = subprocess.run(  # 50 is the whole space: recorded (its pool is not started here)
        [python, "-c", "import sys; from harness.config.manifest_fillin import record_fillin;"
         "from harness.launch.newrun import fillin_seed_problems as check; from functools import partial;"
         "record_fillin(sys.argv[1], 50, check=partial(check, sys.argv[1]))", str(tmp_path / "r")],
        env=env, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert within.returncode == 0, within.stderr
    assert "eval_test_num: 50" in manifest.read_text()


def _new_run(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "new_run.py"), "r", *args],
        env=env, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip


def _bank(root: Path, seeds: list[int]) -> None:
    path = root / TASK / "libero_libero_object.txt"
    path.parent.mkdir(parents=True)
    path.write_text(" ".join(map(str, seeds)) + "\n")


def test_new_run_fill_ins_are_held_to_the_seed_space_as_fillin_sh_is(tmp_path: Path) -> None:
    """`new_run.py --fill-in` (raised EVAL_TEST_NUM, or a bank listing init state 77) is refused
    like `fillin.sh`: one line naming the seeds, exit 2, run.yaml unchanged. It used to be recorded,
    and the seeds then errored three times each and were quarantined for good."""
    (tmp_path / "queue.txt").write_text(f"libero {TASK}\n")
    env = {**_env(tmp_path), "EVAL_TEST_NUM": "2"}
    assert _new_run(tmp_path, env, "--queue", str(tmp_path / "queue.txt")).returncode == 0
    manifest = tmp_path / "r" / "run.yaml"
    before = manifest.read_bytes()
    raised = _new_run(tmp_path, env, "--fill-in", "--test-num", "60")
    assert raised.returncode == 2, raised.stdout + raised.stderr
    assert "seed(s) [50, 51, 52, 53, 54] and 5 more (EVAL_TEST_NUM=60) are outside" in raised.stderr
    assert "Traceback" not in raised.stderr and manifest.read_bytes() == before

    _bank(tmp_path / "bank1", [0, 1])
    _bank(tmp_path / "bank2", [2, 77])
    banked = {**env, "USE_EVAL_SEEDS": "1", "SEEDS_ROOT": str(tmp_path / "bank1")}
    (tmp_path / "r").rename(tmp_path / "r_unbanked")
    assert _new_run(tmp_path, banked, "--queue", str(tmp_path / "queue.txt")).returncode == 0
    before = manifest.read_bytes()
    added = _new_run(tmp_path, banked, "--fill-in", "--seeds-root", str(tmp_path / "bank2"))
    assert added.returncode == 2, added.stdout + added.stderr
    assert "seed(s) [77] (EVAL_TEST_NUM=2) are outside" in added.stderr, added.stderr
    assert manifest.read_bytes() == before
