"""Where things are, named once: the bundle, a checkpoint named by CKPT_NAME, a run named by the user.

The manifest, the node stager, the policy loader and every command-line tool resolve names through
these functions, so a name means the same directory to all of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CODE_ROOT = Path(__file__).resolve().parents[2]


def bundle_root(env: Mapping[str, str] = os.environ) -> Path:
    """$BUNDLE (checkpoints, seed banks), else $EVAL_ROOT, else this checkout."""
    return Path(env.get("BUNDLE") or env.get("EVAL_ROOT") or CODE_ROOT)


def resolve_checkpoint(ckpt_name: str, env: Mapping[str, str] = os.environ) -> Path | None:
    """CKPT_NAME as an existing path, else a dir under $BUNDLE/checkpoints.

    None when it names nothing on disk (empty, or a name the policy resolves itself, such as a hub
    id): the name alone, a contract knob, is then what the contract holds.
    """
    if not ckpt_name:
        return None
    for candidate in (Path(ckpt_name), bundle_root(env) / "checkpoints" / ckpt_name):
        if candidate.exists():
            return candidate.resolve()
    return None


def run_dir(run: str, env: Mapping[str, str] = os.environ) -> Path:
    """A run given by name lives under $RUNS_ROOT; one given as a path (with a `/`) is that path."""
    return Path(run) if "/" in run else Path(env.get("RUNS_ROOT") or "runs") / run
