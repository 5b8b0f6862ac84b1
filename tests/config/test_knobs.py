"""Knobs: one default each, exported to shell from the same table, and all documented in docs/knobs.md."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import knobs

ROOT = Path(__file__).resolve().parents[2]


def test_knob_page_holds_the_generated_table() -> None:
    assert knobs.markdown_table() in (ROOT / "docs" / "knobs.md").read_text()


def test_shell_exports_give_defaults_and_keep_overrides() -> None:
    env = {"PATH": os.environ["PATH"], "EXEC_ACTIONS": "20"}
    script = (
        f'eval "$("{sys.executable}" -m harness.config.knobs --shell)"; '
        'echo "$EXEC_ACTIONS $ACTION_SMOOTH $POLICY"'
    )
    out = subprocess.run(["bash", "-c", script], env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.split() == ["20", knobs.KNOBS["ACTION_SMOOTH"].default, knobs.KNOBS["POLICY"].default]


def test_bad_values_name_the_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASE_TTL", "soon")
    with pytest.raises(ValueError, match="LEASE_TTL='soon'"):
        knobs.get_float("LEASE_TTL")
    monkeypatch.setenv("SMOOTH_ROT", "maybe")
    with pytest.raises(ValueError, match="SMOOTH_ROT='maybe'"):
        knobs.get_bool("SMOOTH_ROT")
