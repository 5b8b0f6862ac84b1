"""Names that say one thing (issue 23): under harness/, no two classes share a name and no two
modules share a file name, so a name read in a log line, a traceback or a doc page points at one
thing. Checked on the source, like tests/test_layers.py.

`vlaeval.py` is the one file name two modules share on purpose, each named for the project it
speaks to in its stage: `episode/bench/vlaeval.py` runs vla-eval's benchmarks, `wire/vlaeval.py`
speaks vla-eval's wire format.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "harness"
SHARED_FILE_NAMES = {"__init__.py", "vlaeval.py"}
# aliases of modules that moved to harness/process/, kept until the model server's files import
# from there (issue 58)


def _shared(names: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: where for name, where in sorted(names.items()) if len(where) > 1}


def test_no_two_harness_classes_share_a_name() -> None:
    classes: dict[str, list[str]] = defaultdict(list)
    for path in sorted(HARNESS.rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef):
                classes[node.name].append(str(path.relative_to(HARNESS)))
    assert _shared(classes) == {}


def test_no_two_harness_modules_share_a_file_name() -> None:
    modules: dict[str, list[str]] = defaultdict(list)
    for path in sorted(HARNESS.rglob("*.py")):
        if path.name not in SHARED_FILE_NAMES:
            modules[path.name].append(str(path.relative_to(HARNESS)))
    assert _shared(modules) == {}


def test_no_two_harness_functions_share_a_timestamp_name() -> None:
    """The records' finished_at (to the microsecond, compared as strings) and the manifest's times
    (to the second, for people) were both `now_iso`: a clock function's name says its precision."""
    clocks: dict[str, list[str]] = defaultdict(list)
    for path in sorted(HARNESS.rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("now"):
                clocks[node.name].append(str(path.relative_to(HARNESS)))
    assert _shared(clocks) == {}


ROOT = HARNESS.parent
# Old code names of one concept each (issue "one name per concept", docs/glossary.md): they must not
# come back as identifiers in harness/ or scripts/. Persisted names (the knobs CRASH_LIMIT,
# BENCH_CONFIG, USE_EVAL_SEEDS, the record fields `worker` and `task_config`, the `.crash.<n>` and
# `_metrics*.jsonl` file names, a wrapper yml's `num_actions`) are strings, not identifiers, and stay.
RETIRED_IDENTIFIERS = {
    "SimJob": "SimAssignment",
    "run_job": "run_assignment",
    "run_job_via": "run_assignment_via",
    "parse_job": "parse_assignment",
    "JOB_FIELDS": "ASSIGNMENT_FIELDS",
    "gpu_slots": "visible_gpus",
    "crashes": "errored_attempts",
    "CRASH": "ERRORED_ATTEMPT",
    "metrics_file": "record_file",
    "metrics_files": "record_files",
    "METRICS_GLOB": "RECORD_FILE_GLOB",
    "TaskConfig": "BenchConfig",
}


def _identifiers(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[-1])
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
    return names


def test_retired_names_do_not_come_back() -> None:
    found: dict[str, list[str]] = defaultdict(list)
    for top in ("harness", "scripts"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for name in _identifiers(path) & RETIRED_IDENTIFIERS.keys():
                found[f"{name} (now {RETIRED_IDENTIFIERS[name]})"].append(str(path.relative_to(ROOT)))
    assert dict(found) == {}
