"""The run's contract: what the environment implies for a run, and the worker's check against it.

The contract holds: every contract knob (`harness.config.knobs.contract_knobs()`: policy,
checkpoint name, benchmark, BENCH_CONFIG, SEEDS_ROOT, cameras, smoothing, rendering, SIM_PIN, ...),
the checkpoint's content fingerprint (`harness.config.fingerprint`), the queue's units, the seed
bank's hash, the benchmark's simulator stack as installed (`harness.config.simstack`), and a
content hash of the packages that decide what an episode does (CODE_PATHS).
Content hashes, not paths or mtimes, so node-local copies verify. `verify_environment` returns the
contract hash (exported as EVAL_CONTRACT into every record) or raises `ContractMismatch` naming each
differing knob or input with both values.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.config.fingerprint import METHOD, fingerprint
from harness.config.knobs import KNOBS, contract_knobs, get, get_int
from harness.config.manifest import ContractMismatch, ManifestError, bank_entry, contract_hash, load_manifest
from harness.config.paths import CODE_ROOT, bundle_root, resolve_checkpoint
from harness.config.policyserver import ServerProbe, policy_server_section
from harness.config.rundir import Cell, RunDir, read_queue
from harness.config.seedbank import SeedBankError, bank_sha256, read_bank, resolve_root, uses_bank
from harness.config.simstack import sim_stack

# What decides an episode: the sim side, the wire, the model side, the policies and the two process
# entry points. The machinery around them (config, queue, worker, node, results, launch) can be
# fixed mid-run without a new contract.
CODE_PATHS = (
    "harness/episode", "harness/model", "harness/wire", "policy",
    "scripts/eval_policy_client.py", "scripts/policy_model_server.py",
)  # fmt: skip


def _queue_sha256(cells: list[Cell]) -> str:
    text = "".join(f"{c.scene} {c.task}\n" for c in sorted(cells))
    return hashlib.sha256(text.encode()).hexdigest()


def _seeds_section(knobs: Mapping[str, str], cells: list[Cell], bundle: str) -> dict[str, Any] | None:
    if not uses_bank(knobs["USE_EVAL_SEEDS"]):
        return None
    bank = read_bank(resolve_root(knobs["SEEDS_ROOT"], bundle), cells, knobs["BENCH_CONFIG"])
    return {
        "sha256": bank_sha256(bank, knobs["BENCH_CONFIG"]),
        "min_per_unit": min(len(seeds) for seeds in bank.values()),
    }


def build_contract(
    cells: list[Cell], env: Mapping[str, str], probe: ServerProbe | None = None
) -> dict[str, Any]:
    """The contract section the environment `env` implies for a run over `cells`; `probe` reads an
    external policy server's section (`harness.episode.serverdial.probe`: this module dials none)."""
    knobs = contract_knobs(env)
    bundle = str(bundle_root(env))
    ckpt = resolve_checkpoint(knobs["CKPT_NAME"], env)
    contract: dict[str, Any] = {
        "knobs": knobs,
        "checkpoint": None if ckpt is None else {"method": METHOD, **fingerprint([ckpt]).as_dict()},
        "queue": {"cells": len(cells), "sha256": _queue_sha256(cells)},
        "seeds": _seeds_section(knobs, cells, bundle),
        "code": {"paths": list(CODE_PATHS), "sha256": code_sha256()},
        "sim_stack": sim_stack(knobs["BENCHMARK"], knobs["SIM_PIN"]),
    }
    server = policy_server_section(get("POLICY_SERVER", env), probe)  # what an external one announced
    if server is not None:
        contract["policy_server"] = server
    return contract


def adopt_unit_seeds(frozen: dict[str, Any], actual: dict[str, Any]) -> None:
    """UNIT_SEEDS=auto in `actual` matches the number the run froze when it resolved its own `auto`
    (an explicit, different number is still a different contract)."""
    if actual["knobs"].get("UNIT_SEEDS", "").strip().lower() == "auto" and "UNIT_SEEDS" in frozen["knobs"]:
        actual["knobs"]["UNIT_SEEDS"] = frozen["knobs"]["UNIT_SEEDS"]


CODE_REFUSED_EXIT = 5  # a sim client's exit status when `check_code` refused (no episode was run)


def code_sha256(root: Path | None = None) -> str:
    """The content hash of the code under CODE_PATHS of `root` (default: the code this process runs)."""
    root = CODE_ROOT if root is None else root
    return fingerprint([root / p for p in CODE_PATHS if (root / p).exists()], root).sha256


def check_code(run_dir: Path | str) -> None:
    """Raise ContractMismatch when the code this process runs is not the code the run's contract
    hashed. Each sim client checks this itself: a node's code copy can be refreshed between the
    worker's start-up check and a later unit."""
    manifest = load_manifest(run_dir)
    want, have = manifest.contract["code"]["sha256"], code_sha256()
    if want != have:
        raise ContractMismatch(
            f"the code this sim client runs ({CODE_ROOT}) is not the run's ({Path(run_dir) / 'run.yaml'}):",
            [f"code.sha256: run.yaml has {want!r}, this code has {have!r} (under {', '.join(CODE_PATHS)})"],
        )


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else key))
        return flat
    return {prefix: value}


def _hint(key: str) -> str:
    """What a difference in `key` means, said after its line."""
    if key == "code.sha256":
        return f" (the code under {', '.join(CODE_PATHS)} changed since the run was created)"
    if key.startswith("sim_stack."):
        return " (another simulator release: install the run's, or create a new run on this one)"
    return ""


def diff_contracts(expected: dict[str, Any], actual: dict[str, Any], actual_label: str) -> list[str]:
    """One line per differing leaf, naming it and both values (one line for a section one side lacks)."""
    lines = []
    for section in sorted(set(expected) | set(actual)):
        if isinstance(expected.get(section), dict) != isinstance(actual.get(section), dict):
            recorded = isinstance(expected.get(section), dict)
            gone = f"run.yaml has one, {actual_label} has none" if recorded else "run.yaml has none"
            hint = " (does CKPT_NAME still name a checkpoint on disk?)" if section == "checkpoint" else ""
            lines.append(f"{section}: {gone}{hint}")
            expected = {k: v for k, v in expected.items() if k != section}
            actual = {k: v for k, v in actual.items() if k != section}
    want, have = _flatten(expected), _flatten(actual)
    for key in sorted(set(want) | set(have)):
        a, b = want.get(key), have.get(key)
        if a != b:
            name = f"knob {key.removeprefix('knobs.')}" if key.startswith("knobs.") else key
            lines.append(f"{name}: run.yaml has {a!r}, {actual_label} has {b!r}{_hint(key)}")
    return lines


def eval_test_num(env: Mapping[str, str]) -> int:
    try:
        return get_int("EVAL_TEST_NUM", env, minimum=1)
    except ValueError as exc:
        raise ManifestError(str(exc)) from None


def check_bank_size(n: int, seeds: dict[str, Any] | None, seeds_root: str) -> None:
    if seeds is not None and n > seeds["min_per_unit"]:
        raise ManifestError(
            f"EVAL_TEST_NUM={n} exceeds the seed bank {seeds_root}: "
            f"some unit has only {seeds['min_per_unit']} seeds"
        )


def _sim_pin_problems(sim_pin: str) -> list[str]:
    """Each `name==version` of SIM_PIN must be what this Python has installed."""
    problems = []
    for spec in sim_pin.split():
        if "==" not in spec:
            continue
        name, want = spec.split("==", 1)
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            have = "not installed"
        if have != want:
            problems.append(f"SIM_PIN {spec}: this environment has {name} {have}")
    return problems


def verify_environment(
    run_dir: Path | str,
    env: Mapping[str, str] = os.environ,
    check_installed: bool = True,
    probe: ServerProbe | None = None,
) -> str:
    """The contract hash, after checking `env` against the run's manifest (`check_installed`: also
    that this Python has SIM_PIN and the run's simulator stack installed, which only a sim env
    has: a launcher's check leaves them to the workers; `probe`: reads POLICY_SERVER's section)."""
    run = RunDir(Path(run_dir))
    manifest = load_manifest(run.root)
    cells = read_queue(run.queue)
    seeds_root = env.get("SEEDS_ROOT", KNOBS["SEEDS_ROOT"].default)
    expected = manifest.contract
    entry = bank_entry(manifest, seeds_root)
    if entry is not None and seeds_root != manifest.knobs["SEEDS_ROOT"]:
        expected = copy.deepcopy(manifest.contract)
        expected["knobs"]["SEEDS_ROOT"] = seeds_root
        expected["seeds"] = entry[0]
    try:
        actual = build_contract(cells, env, probe)
    except (SeedBankError, ManifestError, FileNotFoundError) as exc:
        raise ContractMismatch(f"cannot verify the environment against {run.manifest}:", [str(exc)]) from None
    adopt_unit_seeds(expected, actual)
    if not check_installed:
        actual["sim_stack"] = expected.get("sim_stack")
    differences = diff_contracts(expected, actual, "the environment")
    n = eval_test_num(env)
    limit = entry[1] if entry is not None else manifest.eval_test_num
    if n > limit:
        differences.append(
            f"EVAL_TEST_NUM: run.yaml allows {limit} for SEEDS_ROOT={seeds_root!r}, the environment has {n}; "
            "raise it with a fill-in (orchestrators/fillin.sh)"
        )
    if check_installed:
        differences += _sim_pin_problems(actual["knobs"]["SIM_PIN"])
    if differences:
        raise ContractMismatch(
            f"the environment does not match the run's contract ({run.manifest}):", differences
        )
    return contract_hash(manifest)
