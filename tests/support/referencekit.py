"""Paths and helpers of the reference-policy tests (tests/reference/)."""

from __future__ import annotations

from support.wirekit import REPO

SHIPPED = REPO / "checkpoints" / "reference"
EARLY = REPO / "checkpoints" / "reference-early"
BANK = REPO / "seeds" / "maniskill"
