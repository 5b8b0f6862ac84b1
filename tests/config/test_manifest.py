"""run.yaml and the contract hash: creation, refusal, worker verification, fill-ins."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.config import contract, create, manifest_fillin, plan
from harness.config import manifest as mf
from harness.config.fingerprint import SMALL_FILE, fingerprint
from harness.config.rundir import Cell, RunDir
from harness.config.seedbank import SeedBankError
from harness.launch.newrun import new_run

UNITS = [("kitchen", "pick_cube"), ("kitchen", "stack_cube"), ("office", "pick_cube")]


def write_bank(bundle: Path, name: str, seeds_per_unit: dict[tuple[str, str], list[int]]) -> None:
    for (scene, task), seeds in seeds_per_unit.items():
        path = bundle / name / task / f"{scene}_clean.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(" ".join(map(str, seeds)) + "\n")


@pytest.fixture(autouse=True)
def code_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private code tree, so edits others make to the repo never change the hash mid-test."""
    root = tmp_path / "code"
    for stage in ("worker", "episode"):
        (root / "harness" / stage).mkdir(parents=True)
    (root / "harness" / "worker" / "loop.py").write_text("print('v1')\n")
    (root / "harness" / "episode" / "simclient.py").write_text("print('v1')\n")
    monkeypatch.setattr(contract, "CODE_ROOT", root)
    return root


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    bundle = tmp_path / "bundle"
    write_bank(bundle, "bank1", {u: [100 + i for i in range(5)] for u in UNITS})
    return {
        "BUNDLE": str(bundle), "SEEDS_ROOT": "bank1", "EVAL_TEST_NUM": "2", "BENCH_CONFIG": "clean",
        "BENCHMARK": "tests.support.fastbench:FastBench", "POLICY": "hold",
    }  # fmt: skip


@pytest.fixture
def queue(tmp_path: Path) -> Path:
    path = tmp_path / "queue.txt"
    path.write_text("# units\n" + "".join(f"{s} {t}\n" for s, t in UNITS))
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return tmp_path / "runs" / "r1"


def test_create_freezes_the_eval_and_copies_the_queue(run: Path, queue: Path, env: dict) -> None:
    (run / "queue.txt.leases" / "stale").mkdir(parents=True)
    made = create.create_run(run, queue, env)
    rd = RunDir(run)
    assert rd.queue.read_text() == queue.read_text()
    assert not rd.leases.exists()
    loaded = mf.load_manifest(run)
    assert mf.contract_hash(loaded) == mf.contract_hash(made)
    assert loaded.eval_test_num == 2
    assert loaded.knobs["SEEDS_ROOT"] == "bank1" and "EVAL_TEST_NUM" not in loaded.knobs
    assert set(loaded.knobs) >= {"POLICY", "CKPT_NAME", "ACTION_SMOOTH", "EXEC_ACTIONS", "SIM_PIN"}
    assert loaded.contract["queue"]["cells"] == 3
    assert loaded.contract["seeds"]["min_per_unit"] == 5
    on_disk = yaml.safe_load(rd.manifest.read_text())
    assert on_disk["contract_hash"] == mf.contract_hash(made)


def test_recreate_same_is_a_noop_and_changed_knob_is_refused(run: Path, queue: Path, env: dict) -> None:
    first = create.create_run(run, queue, env)
    (run / "queue.txt.leases" / "unit-a").mkdir(parents=True)
    again = create.create_run(run, queue, {**env, "EVAL_TEST_NUM": "1"})
    assert mf.contract_hash(again) == mf.contract_hash(first)
    assert (run / "queue.txt.leases" / "unit-a").exists(), "re-creating must not clear live leases"
    with pytest.raises(mf.ContractMismatch) as err:
        create.create_run(run, queue, {**env, "ACTION_SMOOTH": "0.7", "EXEC_ACTIONS": "20"})
    text = str(err.value)
    assert "knob ACTION_SMOOTH: run.yaml has '0', this launch has '0.7'" in text
    assert "knob EXEC_ACTIONS: run.yaml has '0', this launch has '20'" in text
    assert len(err.value.differences) == 2
    with pytest.raises(mf.ContractMismatch, match="fill-in"):
        create.create_run(run, queue, {**env, "EVAL_TEST_NUM": "4"})


def test_recreate_with_another_queue_is_refused(run: Path, queue: Path, env: dict, tmp_path: Path) -> None:
    create.create_run(run, queue, env)
    other = tmp_path / "other.txt"
    other.write_text("kitchen pick_cube\n")
    with pytest.raises(mf.ContractMismatch, match=r"queue\.cells: run.yaml has 3, this launch has 1"):
        create.create_run(run, other, env)


def test_eval_test_num_beyond_the_bank_is_refused(run: Path, queue: Path, env: dict) -> None:
    with pytest.raises(mf.ManifestError, match="EVAL_TEST_NUM=6 exceeds the seed bank bank1"):
        create.create_run(run, queue, {**env, "EVAL_TEST_NUM": "6"})
    with pytest.raises(mf.ManifestError, match="EVAL_TEST_NUM='x'"):
        create.create_run(run, queue, {**env, "EVAL_TEST_NUM": "x"})


def test_missing_seed_file_names_it(run: Path, queue: Path, env: dict) -> None:
    (Path(env["BUNDLE"]) / "bank1" / "stack_cube" / "kitchen_clean.txt").unlink()
    with pytest.raises(SeedBankError, match=r"stack_cube/kitchen_clean\.txt does not exist"):
        create.create_run(run, queue, env)


def test_verify_returns_the_hash_and_names_each_difference(run: Path, queue: Path, env: dict) -> None:
    digest = mf.contract_hash(create.create_run(run, queue, env))
    assert contract.verify_environment(run, env) == digest
    assert contract.verify_environment(run, {**env, "EVAL_TEST_NUM": "1", "LEASE_TTL": "5"}) == digest
    with pytest.raises(mf.ContractMismatch) as err:
        contract.verify_environment(run, {**env, "PRIMARY_CAM": "hand_camera", "FAKE_PROPRIO": "1"})
    assert err.value.differences == [
        "knob FAKE_PROPRIO: run.yaml has '0', the environment has '1'",
        "knob PRIMARY_CAM: run.yaml has 'base_camera', the environment has 'hand_camera'",
    ]
    with pytest.raises(mf.ContractMismatch, match=r"EVAL_TEST_NUM: run\.yaml allows 2"):
        contract.verify_environment(run, {**env, "EVAL_TEST_NUM": "3"})


@pytest.mark.parametrize(
    ("knob", "created", "launched"),
    [("MODEL_MAX_BATCH", "1", "8"), ("MODEL_MAX_BATCH", None, "8"), ("SIM_ENV_CACHE", None, "0")],
)
def test_knobs_that_change_outcomes_are_frozen_with_their_resolved_value(
    run: Path, queue: Path, env: dict, knob: str, created: str | None, launched: str
) -> None:
    """Batch composition moves a batched model's answers, and a kept env rebuilds under another seed
    than a fresh one: a launch with another value is refused naming the knob, an unset knob froze
    its default, and the same integer written otherwise is the same value."""
    at_create = env if created is None else {**env, knob: created}
    made = create.create_run(run, queue, at_create)
    frozen = created or contract.KNOBS[knob].default
    assert made.knobs[knob] == frozen
    assert contract.verify_environment(run, {**env, knob: f"0{frozen}"}) == mf.contract_hash(made)
    with pytest.raises(mf.ContractMismatch) as err:
        contract.verify_environment(run, {**env, knob: launched})
    refusal = f"knob {knob}: run.yaml has {frozen!r}, the environment has {launched!r}"
    assert err.value.differences == [refusal]
    with pytest.raises(mf.ContractMismatch, match=f"knob {knob}: run.yaml has {frozen!r}, this launch has"):
        create.create_run(run, queue, {**env, knob: launched})


@pytest.mark.parametrize("knob", ["MODEL_MAX_BATCH", "SIM_ENV_CACHE"])
def test_a_bad_outcome_knob_is_refused_at_creation_naming_it(
    run: Path, queue: Path, env: dict, knob: str
) -> None:
    with pytest.raises(ValueError, match=f"knob {knob}='many': expected int"):
        create.create_run(run, queue, {**env, knob: "many"})
    with pytest.raises(ValueError, match=f"knob {knob}=-1: expected an integer >= 0"):
        create.create_run(run, queue, {**env, knob: "-1"})
    assert not RunDir(run).manifest.exists()


def test_verify_sees_changed_code_bank_and_queue(run: Path, queue: Path, env: dict, code_tree: Path) -> None:
    create.create_run(run, queue, env)
    # machinery: not the contract
    (code_tree / "harness" / "worker" / "loop.py").write_text("print('v2')\n")
    contract.verify_environment(run, env)
    # the episode loop: the contract
    (code_tree / "harness" / "episode" / "simclient.py").write_text("print('v2')\n")
    with pytest.raises(mf.ContractMismatch, match=r"code\.sha256"):
        contract.verify_environment(run, env)
    (code_tree / "harness" / "episode" / "simclient.py").write_text("print('v1')\n")
    write_bank(Path(env["BUNDLE"]), "bank1", {UNITS[0]: [100, 101, 102, 103, 999]})
    with pytest.raises(mf.ContractMismatch, match=r"seeds\.sha256"):
        contract.verify_environment(run, env)
    write_bank(Path(env["BUNDLE"]), "bank1", {UNITS[0]: [100, 101, 102, 103, 104]})
    RunDir(run).queue.write_text("kitchen pick_cube\n")
    with pytest.raises(mf.ContractMismatch, match=r"queue\.sha256"):
        contract.verify_environment(run, env)


def test_checkpoint_fingerprint_is_content_based(run: Path, queue: Path, env: dict, tmp_path: Path) -> None:
    ckpt = Path(env["BUNDLE"]) / "checkpoints" / "m1"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text('{"dim": 10}')
    (ckpt / "weights.bin").write_bytes(b"\1" * (SMALL_FILE + 10))
    copy = tmp_path / "node_cache" / "m1"
    shutil.copytree(ckpt, copy)
    assert fingerprint([ckpt]) == fingerprint([copy])
    made = create.create_run(run, queue, {**env, "CKPT_NAME": "m1"})
    assert made.contract["checkpoint"]["files"] == 2
    (ckpt / "config.json").write_text('{"dim": 20}')
    with pytest.raises(mf.ContractMismatch, match=r"checkpoint\.sha256"):
        contract.verify_environment(run, {**env, "CKPT_NAME": "m1"})


def test_sim_pin_is_checked_against_the_installed_version(run: Path, queue: Path, env: dict) -> None:
    pinned = {**env, "SIM_PIN": "pyyaml==0.0.1"}
    create.create_run(run, queue, pinned)
    with pytest.raises(mf.ContractMismatch, match=r"SIM_PIN pyyaml==0.0.1: this environment has pyyaml \d"):
        contract.verify_environment(run, pinned)


def test_hand_edited_manifest_is_rejected(run: Path, queue: Path, env: dict) -> None:
    create.create_run(run, queue, env)
    path = RunDir(run).manifest
    path.write_text(path.read_text().replace("ACTION_SMOOTH: '0'", "ACTION_SMOOTH: '0.7'"))
    with pytest.raises(mf.ManifestError, match="edited by hand"):
        mf.load_manifest(run)


def test_fillin_raises_eval_test_num_under_the_same_contract(run: Path, queue: Path, env: dict) -> None:
    digest = mf.contract_hash(create.create_run(run, queue, env))
    assert plan.planned_seeds(run, env=env)[Cell("kitchen", "pick_cube")] == [100, 101]
    filled = manifest_fillin.record_fillin(run, eval_test_num=4, env=env)
    assert mf.contract_hash(filled) == digest
    assert filled.eval_test_num == 4
    assert filled.history[-1]["kind"] == "eval_test_num" and filled.history[-1]["to"] == 4
    assert plan.planned_seeds(run, env=env)[Cell("office", "pick_cube")] == [100, 101, 102, 103]
    assert len(manifest_fillin.record_fillin(run, eval_test_num=4, env=env).history) == len(filled.history)
    assert contract.verify_environment(run, {**env, "EVAL_TEST_NUM": "4"}) == digest
    with pytest.raises(mf.ManifestError, match="exceeds the seed bank"):
        manifest_fillin.record_fillin(run, eval_test_num=9, env=env)


def test_fillin_with_a_disjoint_bank(run: Path, queue: Path, env: dict) -> None:
    digest = mf.contract_hash(create.create_run(run, queue, env))
    write_bank(Path(env["BUNDLE"]), "bank2", {u: [200, 201, 202] for u in UNITS})
    filled = manifest_fillin.record_fillin(run, seeds_root="bank2", env=env)
    assert mf.contract_hash(filled) == digest
    assert filled.fillin_banks[0]["eval_test_num"] == 3
    assert plan.planned_seeds(run, env=env)[Cell("kitchen", "stack_cube")] == [100, 101, 200, 201, 202]
    assert contract.verify_environment(run, {**env, "SEEDS_ROOT": "bank2", "EVAL_TEST_NUM": "3"}) == digest
    write_bank(Path(env["BUNDLE"]), "bank3", {u: [104, 300] for u in UNITS})
    with pytest.raises(mf.ContractMismatch, match=r"kitchen pick_cube: seeds \[104\] are also in bank1"):
        manifest_fillin.record_fillin(run, seeds_root="bank3", env=env)
    with pytest.raises(mf.ContractMismatch, match="knob SEEDS_ROOT"):
        contract.verify_environment(run, {**env, "SEEDS_ROOT": "bank3"})


def test_new_run_cli(run: Path, queue: Path, env: dict, tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    script = [sys.executable, str(repo / "scripts" / "new_run.py"), str(run)]
    full = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo), **env}

    def cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*script, *args], env={**full, **extra}, capture_output=True, text=True, timeout=60
        )

    made = cli("--queue", str(queue))
    assert made.returncode == 0, made.stderr
    assert "3 cells in 6 queue units (UNIT_SEEDS=1), EVAL_TEST_NUM=2" in made.stdout  # auto: 1 seed a unit
    digest = cli("--verify").stdout.strip()
    assert len(digest) == 64
    refused = cli("--queue", str(queue), ACTION_SMOOTH="0.5")
    assert refused.returncode == 2
    assert "knob ACTION_SMOOTH: run.yaml has '0', this launch has '0.5'" in refused.stderr
    assert cli("--fill-in", "--test-num", "3").returncode == 0
    assert cli("--verify", EVAL_TEST_NUM="3").stdout.strip() == digest
    assert cli("--fill-in").returncode == 2


def test_planned_seeds_only_ever_grow_at_the_end(run: Path, queue: Path, env: dict) -> None:
    create.create_run(run, queue, env)
    write_bank(Path(env["BUNDLE"]), "bank2", {u: [200, 201] for u in UNITS})
    manifest_fillin.record_fillin(run, seeds_root="bank2", env=env)
    manifest_fillin.record_fillin(run, eval_test_num=4, env=env)
    assert plan.planned_seeds(run, env=env)[Cell("kitchen", "pick_cube")] == [100, 101, 200, 201, 102, 103]


def test_unrunnable_policy_task_or_config_is_refused_before_anything_is_written(
    run: Path, queue: Path, env: dict
) -> None:
    for knob, value, message in [
        ("POLICY", "nosuch", "no deploy_policy.py"),
        ("BENCHMARK", "maniskill", "unknown ManiSkill task 'pick_cube'"),
        ("BENCHMARK", "nosuch.module:Bench", "cannot load it"),
    ]:
        with pytest.raises(mf.ManifestError, match=message):
            new_run(run, queue, {**env, knob: value})
        assert not run.exists()
