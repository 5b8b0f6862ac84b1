"""A private copy of this checkout's code for a test that edits code, or must not see edits others
make to the shared tree while it runs (the contract's code hash would change under it)."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ("harness", "policy", "scripts", "slurm", "orchestrators", "tests", "env.sh", "pyproject.toml")


def copy_code(dest: Path) -> Path:
    """`dest` holding the code of this checkout, its envs linked (not copied)."""
    for name in CODE:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        else:
            shutil.copy2(src, dest / name)
    (dest / "envs").symlink_to(ROOT / "envs")
    return dest
