"""Settings are read once: a process builds one `Settings` from its environment, refusing every bad
knob in one message, and only harness/config/ and the entry points read knobs themselves (an AST scan
of every `knobs.get*` call, as tests/test_layers.py scans imports)."""

from __future__ import annotations

import ast
from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest

from harness.config.knobs import KNOBS
from harness.config.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("harness", "scripts", "policy")
GETTERS = {"get", "get_int", "get_float", "get_bool", "get_choice"}
ENV_NAMES = {"environ", "env", "environment"}  # an environment mapping's names (tests/docs/knob_reads.py)
# Files beside harness/config/ and scripts/ (the entry points) that may still read a knob, and why.
ALLOWED = {
    # a wrapper's get_model sees only its deploy_policy.yml settings; SEEDS_ROOT is its fallback
    "policy/replay/deploy_policy.py",
}
# Files not yet given their settings from their process's entry point (issue 58: this set only shrinks)
PENDING = {
    "harness/model/requests.py",
    "harness/model/server.py",
    "harness/model/vlaeval_server.py",
    "harness/model/wrapper.py",
    "harness/model/wsfront.py",
}


def knob_reads(path: Path) -> list[int]:
    """Lines of `path` that read a knob outside a module's `main` function: a call of a getter of
    harness.config.knobs (through the module, imported under any name, or a getter imported from it),
    or a knob's name looked up in an environment mapping (`env.get("POLICY")`, `os.environ["POLICY"]`)."""
    tree = ast.parse(path.read_text(), str(path))
    modules, getters = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "harness.config":
            modules |= {a.asname or a.name for a in node.names if a.name == "knobs"}
        elif isinstance(node, ast.ImportFrom) and node.module == "harness.config.knobs":
            getters |= {a.asname or a.name for a in node.names if a.name in GETTERS}
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name == "harness.config.knobs" and a.asname}
    mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    in_main = {id(n) for m in mains for n in ast.walk(m)}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in in_main:
            continue
        func = node.func
        through_module = (
            isinstance(func, ast.Attribute)
            and func.attr in GETTERS
            and isinstance(func.value, ast.Name)
            and func.value.id in modules
        )
        if through_module or (isinstance(func, ast.Name) and func.id in getters):
            lines.append(node.lineno)
    for node in ast.walk(tree):
        if id(node) not in in_main and _environment_lookup(node) in KNOBS:
            lines.append(node.lineno)
    return sorted(lines)


def _environment_lookup(node: ast.AST) -> str | None:
    """The constant key `node` reads from an environment mapping, if it is such a read."""
    key, owner = None, None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        if node.func.attr in ("get", "pop", "setdefault"):
            key, owner = node.args[0], node.func.value
    elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        key, owner = node.slice, node.value
    name = getattr(owner, "attr", None) or getattr(owner, "id", None)
    if name in ENV_NAMES and isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    return None


def stray_knob_reads(root: Path = REPO) -> list[str]:
    """`path:line` of each knob read outside harness/config/, scripts/, `main` functions, ALLOWED and
    PENDING."""
    found = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(("harness/config/", "scripts/")) or rel in ALLOWED | PENDING:
                continue
            found += [f"{rel}:{line}" for line in knob_reads(path)]
    return found


def test_knobs_are_read_only_by_config_and_the_entry_points() -> None:
    assert stray_knob_reads() == [], "read the value from the process's Settings, passed down"


def test_pending_files_still_read_knobs() -> None:
    """A file converted to its Settings leaves PENDING, so the set only shrinks."""
    assert [f for f in sorted(PENDING) if not knob_reads(REPO / f)] == []


def test_the_scan_catches_each_way_of_reading_a_knob(tmp_path: Path) -> None:
    (tmp_path / "harness" / "episode").mkdir(parents=True)
    (tmp_path / "harness" / "config").mkdir()
    (tmp_path / "harness" / "episode" / "bad.py").write_text(
        "from harness.config import knobs\n"
        "from harness.config import knobs as k\n"
        "from harness.config.knobs import get_int\n"
        "x = knobs.get('POLICY')\n"
        "def f():\n    return k.get_bool('RECORD_VIDEO'), get_int('IMAGE_SIZE')\n"
        "def main():\n    return knobs.get('POLICY')\n"  # an entry point's main may
        "y = manifest.knobs.get('POLICY')\n"  # a dict of frozen values, not the environment
        "z = os.environ.get('POLICY'), env['CKPT_NAME'], env.get('EVAL_ROOT')\n"  # EVAL_ROOT: no knob
    )
    (tmp_path / "harness" / "config" / "ok.py").write_text(
        "from harness.config import knobs\nknobs.get('A')\n"
    )
    assert stray_knob_reads(tmp_path) == [
        "harness/episode/bad.py:4",
        "harness/episode/bad.py:6",
        "harness/episode/bad.py:6",
        "harness/episode/bad.py:10",
        "harness/episode/bad.py:10",
    ]


def test_every_knob_has_its_field() -> None:
    names = [f.name for f in fields(Settings) if f.name != "contract"]
    assert names == [name.lower() for name in KNOBS]


def test_values_are_typed_as_the_table_declares() -> None:
    s = Settings.from_env(
        {
            "IMAGE_SIZE": "128",
            "ACTION_SMOOTH": "0.7",
            "RECORD_VIDEO": "off",
            "SIMS_PER_WORKER": "auto",
            "CPU_WORKERS": "3",
            "STAGE_ENVS": "sim  model",
            "EVAL_CONTRACT": "abc",
        }
    )
    assert (s.image_size, s.action_smooth, s.record_video) == (128, 0.7, False)
    assert (s.sims_per_worker, s.cpu_workers, s.stage_envs, s.contract) == (None, 3, ("sim", "model"), "abc")


def test_an_unset_knob_is_its_default() -> None:
    s = Settings.from_env({})
    assert (s.policy, s.wire_codec, s.smooth_rot, s.cache_keep) == ("hold", "msgpack", True, ())
    assert s.contract == ""


def test_settings_are_frozen() -> None:
    with pytest.raises(FrozenInstanceError):
        Settings.from_env({}).policy = "other"  # type: ignore[misc]


def test_a_bad_value_is_refused_once_with_one_line_naming_it() -> None:
    with pytest.raises(ValueError) as raised:
        Settings.from_env({"IMAGE_SIZE": "big"})
    expected = "refusing these knob values:\n  - knob IMAGE_SIZE='big': expected an integer >= 1"
    assert str(raised.value) == expected


def test_every_bad_value_is_named_in_the_one_refusal() -> None:
    with pytest.raises(ValueError) as raised:
        Settings.from_env({"IMAGE_SIZE": "0", "WIRE_SHM": "maybe", "POLICY": "ok", "RT_SPP": "2"})
    lines = str(raised.value).splitlines()[1:]
    assert [line.split("=")[0] for line in lines] == ["  - knob IMAGE_SIZE", "  - knob WIRE_SHM"]
