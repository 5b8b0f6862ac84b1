"""docs/contracts.md's checked tables against the code: record fields, wrapper functions and call
arguments, wire message types, the sim process's job line, and the lease queue's on-disk names."""

from __future__ import annotations

import ast
import re

from docpages import DOCS, ROOT, first_column, section, tables

from harness.episode import records, simserver
from harness.wire import protocol

CONTRACTS = DOCS / "contracts.md"


def _table(heading: str, index: int = 0) -> list[str]:
    return first_column(tables(section(CONTRACTS, heading))[index])


def test_record_fields_are_the_code_s() -> None:
    documented = _table("Episode record (`harness.episode.records`)")
    assert documented == [*records.RECORD_FIELDS, "collision"], "record fields drifted from RECORD_FIELDS"
    assert set(documented) == set(records.FIELD_CHECKS), "record fields drifted from FIELD_CHECKS"


def test_message_types_are_the_code_s() -> None:
    assert tuple(_table("Wire messages (`harness.wire.protocol`)")) == protocol.REQUEST_TYPES


def test_job_line_fields_are_the_code_s() -> None:
    documented = _table("Sim client process")
    required = [f for f in documented if f != "progress_file"]
    assert tuple(required) == simserver.JOB_FIELDS
    assert "progress_file" in documented
    assert '"progress_file"' in (ROOT / "harness/worker/sim_slot.py").read_text()


def _looked_up_names() -> tuple[set[str], set[str]]:
    """(module functions, generate_actions keyword arguments) the loader looks up, from its source:
    getattr(module, "x") and `for attr in ("x", ...)` in wrapper.py; `.module.x` / `.model.x`
    attributes and the `for name in ("x", ...)` keyword names in policyload.py."""
    functions, kwargs = set(), set()
    for file in ("harness/model/wrapper.py", "harness/model/policyload.py"):
        tree = ast.parse((ROOT / file).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
                if isinstance(node.args[1], ast.Constant):
                    functions.add(node.args[1].value)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
                if node.value.attr == "module":
                    functions.add(node.attr)
                elif node.value.attr == "model":
                    functions.add(f"model.{node.attr}")
            elif isinstance(node, ast.comprehension | ast.For) and isinstance(node.iter, ast.Tuple):
                names = {e.value for e in node.iter.elts if isinstance(e, ast.Constant)}
                if isinstance(node, ast.For) and getattr(node.target, "id", "") == "attr":
                    functions.update(names)  # the required functions import_wrapper checks
                elif isinstance(node, ast.comprehension) and "params" in ast.dump(node):
                    kwargs.update(names)  # the names checked against generate_actions' parameters
    return functions, kwargs


def test_wrapper_functions_are_the_ones_the_loader_looks_up() -> None:
    functions, kwargs = _looked_up_names()
    heading = "Policy wrapper (`policy/<name>/deploy_policy.py`)"
    documented = {re.sub(r"\(.*", "", name) for name in _table(heading, 0)}
    assert documented == functions, f"doc lists {sorted(documented)}, the loader looks up {sorted(functions)}"
    assert set(_table(heading, 1)) == kwargs


def test_queue_layout_is_the_code_s() -> None:
    heading = "Lease queue and worker (`harness.queue`, `harness.config.plan`, `harness.worker.loop`)"
    documented = _table(heading)
    leases = (ROOT / "harness/queue/leases.py").read_text()
    docstring = ast.get_docstring(ast.parse(leases)) or ""
    layout = docstring.split("On-disk layout", 1)[1].split("\n\n", 2)[1]
    in_code = re.findall(r"(?m)^ {4,6}(\S+)", layout)  # entries; their explanations indent deeper
    assert documented == in_code, "queue layout drifted from harness/queue/leases.py's docstring"
    source = "".join(p.read_text() for p in sorted((ROOT / "harness/queue").glob("*.py"))).replace(
        docstring, ""
    )
    for name in documented:  # each fixed piece of the name is built by the code
        for piece in re.split(r"<[a-z]+>", name.rstrip("/")):
            if piece:
                assert piece in source, f"{name}: {piece!r} is built nowhere in harness/queue"
