"""Every command block the pages mark `<!-- runnable -->` runs as written (bash, from the repository
root, after `. ./env.sh`, runs and outputs in a temp dir); one marked
`<!-- runnable: slow (reason) -->` is listed and skipped with its reason."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from docpages import ROOT, Block, runnable_blocks

BLOCK_TIMEOUT_S = 120  # each quick block takes seconds; generous for a loaded machine

BLOCKS = runnable_blocks()


def test_the_pages_mark_quick_blocks() -> None:
    assert len([b for b in BLOCKS if b.slow is None]) >= 5


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_runnable_block(block: Block, tmp_path: Path) -> None:
    if block.slow is not None:
        pytest.skip(f"{block.name}: slow: {block.slow}")
    env = {**os.environ, "RUNS_ROOT": str(tmp_path / "runs"), "TMPDIR": str(tmp_path)}
    env.pop("PYTEST_CURRENT_TEST", None)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f". ./env.sh\n{block.code}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, f"{block.name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
