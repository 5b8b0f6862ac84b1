"""Secrets from `.env` reach the processes but never a log, a record, a manifest or a report.

A snapshot of the code gets a `.env` holding a token; a small eval runs through the README's
commands (new_run, the local pool with results, status); then every file the run produced and
everything the commands printed is searched for the token.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support.codecopy import copy_code

ROOT = Path(__file__).resolve().parent.parent
SECRET = "hf_TESTSECRET0123456789abcdef"


def _snapshot(root: Path) -> Path:
    copy_code(root)
    (root / ".env").write_text(f"HF_TOKEN={SECRET}\nexport OTHER_SECRET={SECRET}-2\n")
    return root


def test_env_secrets_are_loaded_but_never_written(tmp_path: Path) -> None:
    repo = _snapshot(tmp_path / "repo")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(
        BENCHMARK="tests.support.fastbench:FastBench", POLICY="tests/policies/sleep", USE_EVAL_SEEDS="0",
        EVAL_TEST_NUM="2", RECORD_VIDEO="0", FASTBENCH_STEPS="2", FASTBENCH_STEP_MS="1", STUDY_RUN="sec",
    )  # fmt: skip
    loaded = subprocess.run(
        ["bash", "-c", '. ./env.sh && [ "$HF_TOKEN" = "$1" ] && echo loaded', "-", SECRET],
        cwd=repo, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert loaded.stdout == "loaded\n" and loaded.stderr == ""  # sourced, and silently
    script = (
        '. ./env.sh && "$SIM_PY" scripts/new_run.py sec --queue q.txt'
        ' && bash scripts/run_local.sh 2 --results sec_model && "$SIM_PY" scripts/status.py sec'
    )
    (repo / "q.txt").write_text("s1 t1\ns1 t2\n")
    done = subprocess.run(
        ["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "episodes 4/4" in done.stdout
    assert SECRET not in done.stdout + done.stderr
    written = [p for p in (repo / "runs").rglob("*") if p.is_file()]
    assert any(p.name.startswith("_metrics") for p in written) and any(p.suffix == ".log" for p in written)
    leaks = [p for p in written if SECRET.encode() in p.read_bytes()]
    assert leaks == []
