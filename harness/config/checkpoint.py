"""Whether a checkpoint holds what its policy wrapper loads, checked at run creation without loading it.

Why: a wrapper refuses a broken checkpoint only when its model server starts on a node, after the
run was created and the pool started. A wrapper states what it needs in its deploy_policy.yml
(`needs_checkpoint`: file names, each a name or a list of alternatives, as `[config.json,
[model.safetensors, pytorch_model.bin]]`); this module checks that the checkpoint is a directory
holding each one, readable, `config.json` valid JSON, and every `.safetensors` complete: its header
says how long the file must be, so a truncated copy is caught from its size, with no torch.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

MAX_HEADER = 100 * 1024 * 1024  # safetensors' own bound on the JSON header


def safetensors_problem(path: Path) -> str | None:
    """Why `path` is not a complete safetensors file, or None."""
    try:
        with open(path, "rb") as handle:
            size = path.stat().st_size
            raw = handle.read(8)
            if len(raw) < 8:
                return f"{path}: truncated safetensors file ({size} bytes, not even a header length)"
            (length,) = struct.unpack("<Q", raw)
            if length > MAX_HEADER or 8 + length > size:
                return f"{path}: truncated or corrupt safetensors file ({size} bytes, header of {length})"
            header = json.loads(handle.read(length))
    except OSError as exc:
        return f"{path}: cannot read it: {exc.strerror or exc}"
    except (UnicodeDecodeError, ValueError):
        return f"{path}: corrupt safetensors file (its header is not JSON)"
    if not isinstance(header, dict):
        return f"{path}: corrupt safetensors file (its header is not a mapping)"
    try:
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (KeyError, TypeError, ValueError, IndexError):
        return f"{path}: corrupt safetensors file (a tensor without data_offsets)"
    if 8 + length + end != size:
        want = 8 + length + end
        return f"{path}: truncated or corrupt safetensors file: {size} bytes, its header says {want}"
    return None


def _file_problem(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            if path.name == "config.json":
                json.loads(handle.read())
            else:
                handle.read(1)
    except OSError as exc:
        return f"{path}: cannot read it: {exc.strerror or exc}"
    except (UnicodeDecodeError, ValueError) as exc:
        return f"{path}: not valid JSON ({exc})"
    return safetensors_problem(path) if path.suffix == ".safetensors" else None


def checkpoint_problems(where: str, path: Path, needs: list[Any]) -> list[str]:
    """One line per problem of the checkpoint at `path` (named `where` in messages) against `needs`."""
    if not path.is_dir():
        return [f"{where}: {path} is not a directory (the policy loads a checkpoint dir)"]
    problems, missing = [], []
    for need in needs:
        names = [need] if isinstance(need, str) else list(need)
        present = [path / n for n in names if (path / n).is_file()]
        if not present:
            missing.append(names[0] if len(names) == 1 else "one of " + " / ".join(names))
        elif (why := _file_problem(present[0])) is not None:
            problems.append(f"{where}: {why}")
    if missing:
        problems.insert(0, f"{where}: {path} lacks {', '.join(missing)}")
    return problems


def needs_problem(needs: Any, source: str) -> str | None:
    """Why a wrapper's `needs_checkpoint` setting is malformed, or None."""

    def name_list(item: Any) -> bool:
        return isinstance(item, list) and bool(item) and all(isinstance(n, str) and n for n in item)

    if isinstance(needs, list) and all((isinstance(n, str) and n) or name_list(n) for n in needs):
        return None
    return f"{source}: needs_checkpoint: expected a list of file names (a list: alternatives), got {needs!r}"
