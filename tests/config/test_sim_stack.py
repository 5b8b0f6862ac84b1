"""The simulator stack a benchmark declares is part of the run's contract: a worker on another stack
refuses to run (exit 2, naming both versions), and a LIBERO run is refused on a MuJoCo other than the
pinned one unless BENCH_PARAMS names that release."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from harness.config import contract, simstack
from harness.config.manifest import ContractMismatch, contract_hash, load_manifest
from harness.episode.records import read_tree
from support.poolkit import make_run, pool_env, run_worker


def test_the_contract_holds_the_declared_stack_and_sim_pin_names_its_version() -> None:
    assert simstack.sim_stack("maniskill") == {
        "mani-skill": importlib.metadata.version("mani-skill"),
        "sapien": importlib.metadata.version("sapien"),
    }
    assert simstack.sim_stack("libero")["mujoco"] == "3.3.2"  # requirements/sim.lock's pin
    assert simstack.sim_stack("maniskill", "sapien==3.0.2 setuptools<81")["sapien"] == "3.0.2"
    assert simstack.sim_stack("tests.support.fastbench:FastBench") == {}  # a plug-in declares none
    assert simstack.sim_stack("vla-eval:x:Y")["vla-eval"] == importlib.metadata.version("vla-eval")


def _maniskill_run(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A run of the embedded benchmark (created, never run: every test here is refused first)."""
    run = make_run(tmp_path / "run", [("s", "t0")])
    return run.root, pool_env(run, BENCHMARK="maniskill")


def test_verify_refuses_another_stack_naming_both_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, env = _maniskill_run(tmp_path)
    assert contract.verify_environment(root, env) == contract_hash(load_manifest(root))
    real = simstack.installed_version
    monkeypatch.setattr(simstack, "installed_version", lambda n: "9.9.9" if n == "sapien" else real(n))
    with pytest.raises(ContractMismatch) as refused:
        contract.verify_environment(root, env)
    have = importlib.metadata.version("sapien")
    assert f"sim_stack.sapien: run.yaml has '{have}', the environment has '9.9.9'" in str(refused.value)
    assert contract.verify_environment(root, env, check_installed=False)  # a launcher leaves it to workers


def test_a_worker_on_another_stack_exits_2_naming_both_versions(tmp_path: Path) -> None:
    """A real worker process whose sim env reports another sapien (a dist-info ahead on its path, as a
    node's env with another build would) refuses before it claims anything."""
    root, env = _maniskill_run(tmp_path)
    other = tmp_path / "other_stack" / "sapien-9.9.9.dist-info"
    other.mkdir(parents=True)
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: sapien\nVersion: 9.9.9\n")
    env["PYTHONPATH"] = f"{other.parent}:{env['PYTHONPATH']}"
    log = tmp_path / "w0.log"
    assert run_worker(env, log) == 2, log.read_text()
    text = log.read_text()
    have = importlib.metadata.version("sapien")
    assert f"sim_stack.sapien: run.yaml has '{have}', the environment has '9.9.9'" in text, text
    assert "Traceback" not in text and read_tree(root / "eval_result").records == {}


@pytest.mark.sim
def test_libero_refuses_another_mujoco_unless_bench_params_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.episode.bench import libero_suite

    libero_suite.check_mujoco("3.3.2")  # the pinned stack: accepted
    with pytest.raises(ValueError, match=r"BENCH_PARAMS mujoco='3.17.0': this sim env has mujoco 3.3.2"):
        libero_suite.check_mujoco("3.17.0")
    monkeypatch.setattr(libero_suite, "installed_version", lambda name: "3.17.0")
    with pytest.raises(ValueError) as refused:
        libero_suite.check_mujoco(libero_suite.PINNED_MUJOCO)
    message = str(refused.value)
    assert "this sim env has mujoco 3.17.0, LIBERO runs on mujoco 3.3.2" in message
    assert "BENCH_PARAMS='{mujoco: \"3.17.0\"}'" in message
    libero_suite.check_mujoco("3.17.0")  # named explicitly: accepted (and in the contract's BENCH_PARAMS)
