"""The test command tests its own checkout: a shell that sourced another checkout's env.sh is refused
before anything runs, since the suite's subprocesses would import that checkout's code."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_another_checkouts_eval_root_is_refused_by_name(tmp_path: Path) -> None:
    other = tmp_path / "other-checkout"
    other.mkdir()
    env = {**os.environ, "EVAL_ROOT": str(other), "ENVS_ROOT": str(other / "envs")}
    command = ["bash", str(REPO / "scripts/test.sh"), "--co", "-q"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"EVAL_ROOT={other} is not this checkout ({REPO.resolve()})" in done.stderr
    assert "unset EVAL_ROOT" in done.stderr
    assert done.stdout == ""  # nothing installed, linted or collected
    assert not (other / "envs").exists()
