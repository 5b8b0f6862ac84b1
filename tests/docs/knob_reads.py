"""Where the code reads knobs: every `knobs.get*("NAME")` call and every environment read of an
upper-case name in harness/, scripts/ and orchestrators/, and every `${NAME:-...}` in the shell
scripts under slurm/, scripts/ and orchestrators/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from docpages import ROOT

PYTHON_DIRS = ("harness", "scripts", "orchestrators", "policy")
SHELL_DIRS = ("slurm", "scripts", "orchestrators")
SHELL_DEFAULT = re.compile(r"\$\{([A-Z][A-Z0-9_]*):-")
KNOB_GETTERS = {"get", "get_int", "get_float", "get_bool", "get_choice"}
ENV_NAMES = {"environ", "env", "source", "environment"}  # the names an environment mapping goes by


def _name_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def python_reads(path: Path) -> set[str]:
    """Upper-case names `path` reads as knobs or from an environment mapping."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        key = None
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            owner = _name_of(node.func.value)
            if (owner == "knobs" and node.func.attr in KNOB_GETTERS) or (
                owner in ENV_NAMES and node.func.attr in ("get", "pop", "setdefault")
            ):
                key = node.args[0]
        elif isinstance(node, ast.Call) and _name_of(node.func) == "getenv" and node.args:
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and _name_of(node.value) in ENV_NAMES:
            key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.isupper():
            found.add(key.value)
    return found


def knob_reads() -> dict[str, str]:
    """Every name read, with the first file that reads it."""
    out: dict[str, str] = {}
    for top in PYTHON_DIRS:
        for path in sorted((ROOT / top).rglob("*.py")):
            for name in python_reads(path):
                out.setdefault(name, str(path.relative_to(ROOT)))
    for top in SHELL_DIRS:
        for path in sorted((ROOT / top).glob("*.sh")):
            for name in SHELL_DEFAULT.findall(path.read_text()):
                out.setdefault(name, str(path.relative_to(ROOT)))
    return out
