"""Shared fixtures of the reference-policy tests: the model env's python and the shipped checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.referencekit import SHIPPED
from support.wirekit import model_python


@pytest.fixture(scope="session")
def model_py() -> str:
    exe = model_python()
    if exe is None:
        pytest.skip("MODEL_PY env not installed")
    return exe


@pytest.fixture
def ckpt_copy(tmp_path: Path) -> Path:
    """A private copy of the shipped checkpoint, to break."""
    import shutil

    dest = tmp_path / "checkpoints" / "broken"
    shutil.copytree(SHIPPED, dest)
    return dest
