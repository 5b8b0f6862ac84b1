"""The external policy server in the run's contract: recorded at creation, checked by every worker
and again by each sim client at its hello."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.config import create
from harness.config.contract import verify_environment
from harness.config.manifest import ContractMismatch, load_manifest
from harness.config.settings import Settings
from harness.episode.serverdial import probe
from tests.interop.conftest import VLA_MAP, free_port, run_client


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    mapping = tmp_path / "map.yaml"
    mapping.write_text(VLA_MAP)
    return {
        "BUNDLE": str(tmp_path / "bundle"), "USE_EVAL_SEEDS": "0", "EVAL_TEST_NUM": "2",
        "BENCHMARK": "tests.support.fastbench:FastBench", "POLICY_SERVER_MAP": str(mapping),
        "POLICY_SERVER_RETRIES": "1",
    }  # fmt: skip


def new_run(tmp_path: Path, env: dict[str, str]) -> Path:
    queue = tmp_path / "queue.txt"
    queue.write_text("table T\n")
    run = tmp_path / "runs" / "r1"
    create.create_run(run, queue, env, probe=probe(Settings.from_env(env)))
    return run


def test_the_contract_records_the_server_and_refuses_another(
    tmp_path: Path, env: dict[str, str], vla_server: Callable[..., str]
) -> None:
    first = vla_server("hold")
    run = new_run(tmp_path, {**env, "POLICY_SERVER": first})
    section = load_manifest(run).contract["policy_server"]
    assert section["protocol"] == "vla-eval" and section["policy"] == "vla-hold"
    assert len(section["metadata_sha256"]) == 64 and len(section["map_sha256"]) == 64
    verify(run, {**env, "POLICY_SERVER": vla_server("hold")})  # same model
    with pytest.raises(ContractMismatch, match=r"policy_server\.metadata_sha256: run\.yaml has"):
        verify(run, {**env, "POLICY_SERVER": vla_server("declare_9")})
    gone = f"127.0.0.1:{free_port()}"
    with pytest.raises(ContractMismatch, match=f"POLICY_SERVER={gone}: cannot read its metadata"):
        verify(run, {**env, "POLICY_SERVER": gone})
    with pytest.raises(ContractMismatch, match="this check does not dial policy servers"):
        verify_environment(run, {**env, "POLICY_SERVER": gone}, check_installed=False)  # no probe: refused


def verify(run: Path, env: dict[str, str]) -> str:
    """A worker's contract check, without the installed simulator (it dials the server)."""
    return verify_environment(run, env, check_installed=False, probe=probe(Settings.from_env(env)))


def test_a_sim_client_refuses_a_server_other_than_the_contracts(
    tmp_path: Path, env: dict[str, str], vla_server: Callable[..., str]
) -> None:
    run = new_run(tmp_path, {**env, "POLICY_SERVER": vla_server("hold")})
    other = vla_server("wrong_shape")  # compatible specs, other metadata: another model
    result = run_client(tmp_path / "client", other, VLA_MAP, [0], run_dir=run)
    assert result.rc == 2 and not result.records, result.err
    assert "is not the run contract's" in result.err
