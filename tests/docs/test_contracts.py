"""docs/contracts.md's checked tables against the code: stage ranks, record fields, wrapper functions
and call arguments, wire message types and codecs, the sim process's assignment line, progress file and exit
statuses, the lease queue's settings and on-disk names."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
from pathlib import Path
from types import SimpleNamespace

from docpages import DOCS, ROOT, first_column, section, tables

from harness import runqueue
from harness.config import contract
from harness.episode import records, simclient, simserver
from harness.queue.leases import QueueSettings
from harness.wire import codecs, protocol
from harness.worker.sim_process import read_progress

CONTRACTS = DOCS / "contracts.md"
SIM_CLIENT = "Sim client process"
QUEUE = "Lease queue and worker (`harness.queue`, `harness.runqueue`, `harness.worker.loop`)"


def _table(heading: str, index: int = 0) -> list[str]:
    return first_column(tables(section(CONTRACTS, heading))[index])


def _rows(heading: str, index: int = 0) -> list[list[str]]:
    """Every cell of a table's body rows, backticks stripped."""
    body = tables(section(CONTRACTS, heading))[index].splitlines()[2:]
    return [[cell.strip().strip("`") for cell in row.strip().strip("|").split("|")] for row in body]


def test_stage_ranks_are_test_layers_s() -> None:
    """tests/test_layers.py's RANKS, read from its source (tests/ is not a package)."""
    layers = (ROOT / "tests/test_layers.py").read_text()
    ranks = ast.literal_eval(re.search(r"(?ms)^RANKS = (\{.*?^\})", layers).group(1))
    assert {stage: int(rank) for stage, rank in _rows("Python package `harness`")} == ranks


def test_record_fields_are_the_code_s() -> None:
    documented = _table("Episode record (`harness.episode.records`)")
    expected = [*records.RECORD_FIELDS, *records.OPTIONAL_FIELDS]
    assert documented == expected, "record fields drifted from RECORD_FIELDS"
    assert set(documented) == set(records.FIELD_CHECKS), "record fields drifted from FIELD_CHECKS"


def test_message_types_are_the_code_s() -> None:
    assert tuple(_table("Wire messages (`harness.wire.protocol`)")) == protocol.REQUEST_TYPES


def test_codecs_are_the_code_s() -> None:
    assert _table("Wire messages (`harness.wire.protocol`)", 1) == list(codecs.CODECS)


def test_assignment_line_fields_are_the_code_s() -> None:
    documented = _table(SIM_CLIENT)
    required = [f for f in documented if f != "progress_file"]
    assert tuple(required) == simserver.ASSIGNMENT_FIELDS
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
    documented = _table(QUEUE)
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


def test_progress_file_is_the_code_s(tmp_path: Path) -> None:
    """The doc's example reads back with the worker's reader, and has the keys the sim client writes."""
    text = section(CONTRACTS, SIM_CLIENT)
    example = re.search(r"```json\n(.*?)\n", text).group(1)
    path = tmp_path / "progress.json"
    path.write_text(example)
    assert read_progress(path)[1] == json.loads(example)["seed"]
    writer = SimpleNamespace(
        assignment=SimpleNamespace(progress_file=path), _progress_at=0.0, _seed_started_at=1.0
    )
    simclient.SimClient._progress(writer, 7, 0)  # an episode's start: always written
    assert json.loads(path.read_text()).keys() == json.loads(example).keys()
    assert f"`simclient.PROGRESS_EVERY_S` ({simclient.PROGRESS_EVERY_S:g} s)" in text


def test_exit_statuses_are_the_code_s() -> None:
    """Each constant the table names has its status, and the table names every status constant of
    the sim process (harness.episode.simserver's own and the one it imports from contract)."""
    rows = _rows(SIM_CLIENT, 1)
    assert rows[0][:2] == ["0", ""]
    modules = {"simserver": simserver, "contract": contract}
    for code, name, _ in rows[1:]:
        module, attr = name.split(".")
        assert getattr(modules[module], attr) == int(code), f"{name} is not {code}"
    in_code = {k: v for k, v in vars(simserver).items() if k.isupper() and type(v) is int}
    assert {name.split(".")[1]: int(code) for code, name, _ in rows[1:]} == in_code


def test_queue_settings_are_the_code_s() -> None:
    rows = _rows(QUEUE, 1)
    assert [field for field, _ in rows] == [f.name for f in dataclasses.fields(QueueSettings)]
    source = inspect.getsource(runqueue.queue_settings)
    for field, knob in rows:  # the knob the doc names is the one queue_settings reads for it
        name = re.match(r"[A-Z_]+", knob).group(0)  # read as knobs.get*("NAME") or settings.name
        assert re.search(rf"\b{field}=.*(\"{name}\"|\.{name.lower()}\b)", source), f"{field}: not from {name}"
