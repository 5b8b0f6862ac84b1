"""The import rules of the layout (docs/architecture.md, "Which file does what"), checked on the
source: every `import` and `from ... import` of every module under harness/, including imports
inside functions.

- A stage imports only stages below it (RANKS), never one above or beside it; `episode` and `model`
  are peers that talk over the wire only, so neither imports the other.
- `harness/process` (the error path, stop signals) and `harness/pathnames` (a name as a path
  component) are the floor: they import nothing of the harness.
- `harness/config` imports only itself and the floor: no queue, no wire (issue 58), so a run's
  contract is built and checked without either. `harness/runqueue` joins the plan to the queue.
- `harness/wire` imports nothing of the harness but itself.
- `harness/queue` imports nothing of the harness but itself and `harness/pathnames` (no manifest,
  benchmark, policy loader).
- `training/` (the reference policy's training) may import `policy/` and the harness; nothing under
  `harness/` or `policy/` imports it, and no module only training uses lies under the contract's
  CODE_PATHS, so editing training code never changes a run's contract.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.config.contract import CODE_PATHS

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "harness"
TRAINING_ENTRIES = ("scripts/train_reference_policy.py", "scripts/collect_training_data.py")
# what runs an episode: the worker, the two process entry points, and every policy wrapper they load
PRODUCT_ENTRIES = (
    "harness/worker/loop.py",
    "scripts/eval_policy_client.py",
    "scripts/policy_model_server.py",
)
RANKS = {  # higher imports lower
    "process": 0,
    "pathnames": 0,
    "config": 1,
    "wire": 1,
    "queue": 1,
    "episode": 2,
    "model": 2,
    "runqueue": 2,
    "results": 3,
    "worker": 4,
    "node": 4,
    "launch": 5,
}
ALONE = {"wire": (), "queue": ("pathnames",)}  # a stage that imports nothing of the harness but these
# (file, stage) imports that break the ranks for now, each with the change that removes it
ALLOWED = {
    ("config/knobs.py", "wire"),  # removed by the transport change
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
            elif (rel.as_posix(), target) in ALLOWED:
                continue
            elif stage in ALONE and target not in (stage, *ALONE[stage]):
                problems.append(f"{where}: {stage} imports nothing of the harness but itself")
            elif target != stage and RANKS[target] >= RANKS[stage]:
                problems.append(f"{where}: {target} is not below {stage}")
    return problems


def test_imports_point_from_higher_stages_to_lower_ones() -> None:
    assert violations() == []


def test_each_allowance_is_still_needed() -> None:
    """An allowance whose import is gone is deleted, so the list only shrinks."""
    used = {(f, stage_of(m)) for f, _ in ALLOWED for _, m in harness_imports(HARNESS / f)}
    assert used >= ALLOWED


@pytest.mark.parametrize(
    ("stage", "line", "why"),
    [
        ("queue", "from harness.config.manifest import load_manifest", "imports nothing of the harness"),
        ("queue", "from harness.episode.bench import load_benchmark", "imports nothing of the harness"),
        ("queue", "from harness.model.policyload import policy_dir", "imports nothing of the harness"),
        ("queue", "from harness.process.failures import Failed", "imports nothing of the harness"),
        ("wire", "from harness.config import knobs", "imports nothing of the harness"),
        ("config", "from harness.episode.bench import load_benchmark", "episode is not below config"),
        ("config", "from harness.queue.units import Unit", "queue is not below config"),
        ("config", "from harness.wire.errors import WireError", "wire is not below config"),
        ("process", "from harness.wire.errors import WireError", "wire is not below process"),
        ("pathnames", "from harness.config import knobs", "config is not below pathnames"),
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


def repo_imports(path: Path, root: Path = REPO) -> set[Path]:
    """The files of the repository at `root` that `path` imports (absolute imports; packages'
    `__init__.py` included)."""
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                base = root.joinpath(*parts[:i])
                found |= {f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()}
    return found


def reachable(entries: list[Path], root: Path = REPO) -> set[Path]:
    """Every repository file the `entries` import, transitively, the entries included."""
    seen: set[Path] = set()
    todo = list(entries)
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo.extend(repo_imports(path, root) - seen)
    return seen


def training_only_under_contract(root: Path = REPO) -> list[str]:
    """Modules that only the training scripts use but that lie under CODE_PATHS (hashed by the contract)."""
    product = [root / p for p in PRODUCT_ENTRIES] + sorted(root.glob("policy/*/deploy_policy.py"))
    training = reachable([root / p for p in TRAINING_ENTRIES], root) - reachable(product, root)
    hashed = [root / p for p in CODE_PATHS]
    return sorted(str(f.relative_to(root)) for f in training if any(f.is_relative_to(h) for h in hashed))


def training_importers(root: Path = REPO) -> list[str]:
    """`harness/` or `policy/` modules that import the training package (only the reverse is allowed)."""
    problems = []
    for package in ("harness", "policy"):
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                if any(n == "training" or n.startswith("training.") for n in names):
                    problems.append(f"{path.relative_to(root)}:{node.lineno}: imports training")
    return problems


def test_training_only_code_is_outside_the_contract() -> None:
    assert training_only_under_contract() == []


def test_nothing_the_contract_hashes_imports_training() -> None:
    assert training_importers() == []


def test_the_training_checks_catch_a_violation(tmp_path: Path) -> None:
    for name in ("harness", "policy/reference", "scripts", "training"):
        (tmp_path / name).mkdir(parents=True)
    for entry in PRODUCT_ENTRIES:
        (tmp_path / entry).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / entry).write_text("from policy.reference import deploy_policy\n")
    (tmp_path / "policy/reference/deploy_policy.py").write_text("from training import trainer\n")
    (tmp_path / "policy/reference/dataset.py").write_text("")
    (tmp_path / "training/trainer.py").write_text("")
    for entry in TRAINING_ENTRIES:
        (tmp_path / entry).write_text("from policy.reference.dataset import x\n")
    assert training_only_under_contract(tmp_path) == ["policy/reference/dataset.py"]
    assert training_importers(tmp_path) == ["policy/reference/deploy_policy.py:1: imports training"]
