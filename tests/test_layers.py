"""The import rules of the layout (README, "Layout"), checked on the source: every `import` and
`from ... import` of every module under harness/, including imports inside functions.

- A stage imports only stages below it (RANKS), never one above; `episode` and `model` are peers
  that talk over the wire only, so neither imports the other.
- `harness/wire` imports nothing of the harness but itself.
- `harness/queue` imports nothing of the harness but itself (no manifest, benchmark, policy loader).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[1] / "harness"
RANKS = {  # higher imports lower
    "wire": 0,
    "queue": 0,
    "config": 1,
    "episode": 2,
    "model": 2,
    "results": 3,
    "worker": 4,
    "node": 4,
    "launch": 5,
}


def harness_imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of each harness import in `path`; `from harness import x` counts as
    harness.x."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("harness")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness"):
            if node.module == "harness":
                found += [(node.lineno, f"harness.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def violations(root: Path = HARNESS) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if len(rel.parts) < 2:
            continue  # harness/__init__.py
        stage = rel.parts[0]
        if stage not in RANKS:
            problems.append(f"{rel}: stage {stage!r} has no rank in tests/test_layers.py")
            continue
        for line, module in harness_imports(path):
            target = stage_of(module)
            where = f"harness/{rel}:{line} imports {module}"
            if target not in RANKS:
                problems.append(f"{where}: not a stage")
            elif stage in ("wire", "queue") and target != stage:
                problems.append(f"{where}: {stage} imports nothing of the harness but itself")
            elif target != stage and RANKS[target] >= RANKS[stage]:
                problems.append(f"{where}: {target} is not below {stage}")
    return problems


def test_imports_point_from_higher_stages_to_lower_ones() -> None:
    assert violations() == []


@pytest.mark.parametrize(
    ("stage", "line", "why"),
    [
        ("queue", "from harness.config.manifest import load_manifest", "imports nothing of the harness"),
        ("queue", "from harness.episode.bench import load_benchmark", "imports nothing of the harness"),
        ("queue", "from harness.model.policyload import policy_dir", "imports nothing of the harness"),
        ("wire", "from harness.config import knobs", "imports nothing of the harness"),
        ("config", "from harness.episode.bench import load_benchmark", "episode is not below config"),
        ("episode", "from harness.model.server import ModelServer", "model is not below episode"),
        ("results", "    from harness.launch.pools import Pool", "launch is not below results"),
    ],
)
def test_the_check_catches_each_kind_of_violation(tmp_path: Path, stage: str, line: str, why: str) -> None:
    for name in RANKS:
        (tmp_path / name).mkdir()
    body = f"def late():\n{line}\n" if line.startswith(" ") else f"{line}\n"
    (tmp_path / stage / "bad.py").write_text(body)
    [problem] = violations(tmp_path)
    assert f"{stage}/bad.py" in problem and why in problem
