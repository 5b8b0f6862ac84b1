"""Count the repository's files on one episode's path, `srun` to `results.txt`, by following imports.

Starts from the entry points an episode passes through (the node and worker shell scripts, the two
process entry scripts, the organize step) and follows every `import` of a module of this repository
(ast, transitively; imports inside functions count, because they run on the path), then adds the
modules the path loads by name at run time: the default benchmark adapter and the default policy
wrapper. docs/architecture.md states the number this prints; tests/docs/test_architecture.py
checks that it still does.

    $SIM_PY tests/docs/episode_path.py [--list]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SHELL_FILES = ("slurm/eval_node.sh", "slurm/eval_worker.sh", "env.sh")
PYTHON_ENTRIES = (
    "harness/node/steps.py",  # eval_node.sh's decisions
    "harness/worker/loop.py",  # eval_worker.sh's loop
    "scripts/eval_policy_client.py",  # the sim process
    "scripts/policy_model_server.py",  # the model server
    "scripts/organize_results.py",  # records -> results.txt
    "harness/episode/bench/maniskill.py",  # BENCHMARK=maniskill, loaded by name
    "policy/hold/deploy_policy.py",  # POLICY=hold, loaded from its directory
)


def module_file(name: str) -> Path | None:
    """The repository file of dotted module `name`, or None for a module outside it."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_files(path: Path) -> set[Path]:
    """The repository files `path` imports, its packages' `__init__.py` included."""
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__
                if (file := module_file(".".join(parts[:i]))) is not None:
                    found.add(file)
    return found


def episode_path_files() -> list[Path]:
    """Every repository file on the path, entry points and shell scripts included, sorted."""
    seen: set[Path] = set()
    todo = [ROOT / p for p in PYTHON_ENTRIES]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo.extend(imported_files(path) - seen)
    return sorted(seen | {ROOT / p for p in SHELL_FILES})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print each file, then the count")
    args = parser.parse_args()
    files = episode_path_files()
    if args.list:
        for path in files:
            print(path.relative_to(ROOT))
    print(f"{len(files)} files on an episode's path")


if __name__ == "__main__":
    sys.exit(main())
