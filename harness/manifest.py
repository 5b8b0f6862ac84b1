"""The run manifest (`run.yaml`) and the run's contract hash.

A run dir's results are only comparable if every episode in it was produced under the same
conditions. The manifest freezes those conditions when the run is created, and every worker checks
its own environment against it before it runs anything, so a changed knob cannot silently mix two
evals in one run dir.

Public API
----------
`create_run(run_dir, queue_file, env=os.environ) -> Manifest`
    Copy the queue file to `queue.txt`, clear the leases and write `run.yaml`. Re-creating an
    existing run with the same contract returns its manifest untouched; with a different contract,
    or a higher EVAL_TEST_NUM (that is a fill-in), it raises `ContractMismatch`.
`load_manifest(run_dir) -> Manifest`
`contract_hash(manifest) -> str`
    sha256 of the manifest's `contract` section (canonical JSON): everything but EVAL_TEST_NUM,
    the fill-in banks, the history and the informational `info`.
`verify_environment(run_dir, env=os.environ) -> str`
    The worker's start check. Returns the contract hash (exported as EVAL_CONTRACT into every
    record) or raises `ContractMismatch` naming each differing knob or input with both values.
`record_fillin(run_dir, eval_test_num=None, seeds_root=None, env=os.environ) -> Manifest`
    Raise EVAL_TEST_NUM, or add a seed bank disjoint from the run's banks; recorded in `history`,
    the contract hash is unchanged. Idempotent: recording what is already recorded changes nothing.
`planned_seeds(run_dir, manifest=None, env=os.environ) -> dict[Cell, list[int]]`
    Every seed each unit should have a record for: the first EVAL_TEST_NUM of the original bank and
    of each fill-in bank, in the order the history added them (append-only, so unit slices of the
    list stay stable across fill-ins). Workers plan their units from this.

The contract holds: every contract knob (`harness.knobs.contract_knobs()`: policy, checkpoint name,
benchmark, BENCH_CONFIG, SEEDS_ROOT, cameras, smoothing, rendering, SIM_PIN, ...), the checkpoint's
content fingerprint (`harness.fingerprint`), the queue's units, the seed bank's hash, and a content
hash of the eval code (CODE_PATHS). Content hashes, not paths or mtimes, so node-local copies verify.
"""

from __future__ import annotations

import copy
import getpass
import hashlib
import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from harness.bench import load_benchmark
from harness.fingerprint import METHOD, fingerprint
from harness.knobs import KNOBS, contract_knobs, get_int
from harness.policyload import PolicyError, policy_dir
from harness.rundir import Cell, QueueFileError, RunDir, read_queue
from harness.seedbank import SeedBankError, bank_sha256, read_bank, resolve_root

FORMAT = 1
CODE_ROOT = Path(__file__).resolve().parent.parent
# The code that decides what an episode does: the benchmark, the sim client's loop and action handling,
# the wire, the model server and the policies. The machinery around it (queue, worker, node script,
# staging, results, orchestrators) can be fixed mid-run without a new contract.
CODE_PATHS = (
    "harness/bench", "harness/wire", "harness/actions.py", "harness/simclient.py", "harness/video.py",
    "harness/server.py", "harness/policyload.py", "policy",
    "scripts/eval_policy_client.py", "scripts/policy_model_server.py",
)  # fmt: skip
SIMULATOR_DISTS = ("sapien", "mani_skill")


class ContractMismatch(ValueError):
    """A launch whose environment differs from the run's manifest; `differences` names each one."""

    def __init__(self, headline: str, differences: list[str]) -> None:
        super().__init__(headline + "".join(f"\n  - {d}" for d in differences))
        self.differences = differences


class ManifestError(ValueError):
    """A run.yaml that is missing, malformed or edited by hand."""


@dataclass
class Manifest:
    run: str
    contract: dict[str, Any]
    eval_test_num: int
    fillin_banks: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def knobs(self) -> dict[str, str]:
        return self.contract["knobs"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "run": self.run,
            "contract_hash": contract_hash(self),
            "contract": self.contract,
            "eval_test_num": self.eval_test_num,
            "fillin_banks": self.fillin_banks,
            "history": self.history,
            "info": self.info,
        }


def contract_hash(manifest: Manifest) -> str:
    text = json.dumps(manifest.contract, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _bundle(env: Mapping[str, str]) -> str:
    return env.get("BUNDLE") or env.get("EVAL_ROOT") or str(CODE_ROOT)


def resolve_checkpoint(ckpt_name: str, bundle: str) -> Path | None:
    """CKPT_NAME as a path, else a dir under $BUNDLE/checkpoints (as the node stager resolves it).

    None when it names nothing on disk (empty, or a name the policy resolves itself, such as a hub
    id): the name alone, a contract knob, is then what the contract holds.
    """
    if not ckpt_name:
        return None
    for candidate in (Path(ckpt_name), Path(bundle) / "checkpoints" / ckpt_name):
        if candidate.exists():
            return candidate.resolve()
    return None


def _queue_sha256(cells: list[Cell]) -> str:
    text = "".join(f"{c.scene} {c.task}\n" for c in sorted(cells))
    return hashlib.sha256(text.encode()).hexdigest()


def _seeds_section(knobs: Mapping[str, str], cells: list[Cell], bundle: str) -> dict[str, Any] | None:
    if knobs["USE_EVAL_SEEDS"].strip().lower() in ("0", "false", "no", "off", ""):
        return None
    bank = read_bank(resolve_root(knobs["SEEDS_ROOT"], bundle), cells, knobs["BENCH_CONFIG"])
    return {
        "sha256": bank_sha256(bank, knobs["BENCH_CONFIG"]),
        "min_per_unit": min(len(seeds) for seeds in bank.values()),
    }


def build_contract(cells: list[Cell], env: Mapping[str, str]) -> dict[str, Any]:
    """The contract section the environment `env` implies for a run over `cells`."""
    knobs = contract_knobs(env)
    bundle = _bundle(env)
    ckpt = resolve_checkpoint(knobs["CKPT_NAME"], bundle)
    code = fingerprint([CODE_ROOT / p for p in CODE_PATHS if (CODE_ROOT / p).exists()], CODE_ROOT)
    return {
        "knobs": knobs,
        "checkpoint": None if ckpt is None else {"method": METHOD, **fingerprint([ckpt]).as_dict()},
        "queue": {"units": len(cells), "sha256": _queue_sha256(cells)},
        "seeds": _seeds_section(knobs, cells, bundle),
        "code": {"paths": list(CODE_PATHS), "sha256": code.sha256},
    }


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else key))
        return flat
    return {prefix: value}


def diff_contracts(expected: dict[str, Any], actual: dict[str, Any], actual_label: str) -> list[str]:
    """One line per differing leaf, naming it and both values."""
    want, have = _flatten(expected), _flatten(actual)
    lines = []
    for key in sorted(set(want) | set(have)):
        a, b = want.get(key), have.get(key)
        if a != b:
            name = f"knob {key.removeprefix('knobs.')}" if key.startswith("knobs.") else key
            hint = (
                f" (the code under {', '.join(CODE_PATHS)} changed since the run was created)"
                if key == "code.sha256"
                else ""
            )
            lines.append(f"{name}: run.yaml has {a!r}, {actual_label} has {b!r}{hint}")
    return lines


def _eval_test_num(env: Mapping[str, str]) -> int:
    try:
        return get_int("EVAL_TEST_NUM", env, minimum=1)
    except ValueError as exc:
        raise ManifestError(str(exc)) from None


def _check_bank_size(n: int, seeds: dict[str, Any] | None, seeds_root: str) -> None:
    if seeds is not None and n > seeds["min_per_unit"]:
        raise ManifestError(
            f"EVAL_TEST_NUM={n} exceeds the seed bank {seeds_root}: "
            f"some unit has only {seeds['min_per_unit']} seeds"
        )


def _git_version() -> dict[str, str]:
    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(CODE_ROOT), *args], capture_output=True, text=True, timeout=20, check=False
        )
        return result.stdout.strip() if result.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    return {"git_commit": commit, "git_describe": git("describe", "--always", "--dirty")} if commit else {}


def _simulator_versions() -> dict[str, str]:
    versions = {}
    for dist in SIMULATOR_DISTS:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def _write_yaml(path: Path, manifest: Manifest, exclusive: bool) -> None:
    """Write atomically: temp file then rename, or hard link when the file must not exist yet."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".run.yaml.")
    try:
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(manifest.as_dict(), handle, sort_keys=False, default_flow_style=False)
        if exclusive:
            os.link(tmp, path)  # atomic create-if-absent, also on NFS
        else:
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_manifest(run_dir: Path | str) -> Manifest:
    path = RunDir(Path(run_dir)).manifest
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ManifestError(f"{path} does not exist: create the run first (scripts/new_run.py)") from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError(f"{path}: not a run manifest of format {FORMAT}")
    try:
        manifest = Manifest(
            run=data["run"],
            contract=data["contract"],
            eval_test_num=int(data["eval_test_num"]),
            fillin_banks=data.get("fillin_banks") or [],
            history=data.get("history") or [],
            info=data.get("info") or {},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"{path}: malformed manifest ({exc!r})") from None
    if contract_hash(manifest) != data.get("contract_hash"):
        raise ManifestError(
            f"{path}: its contract section no longer matches its contract_hash (edited by hand?); "
            "create a new run instead of editing run.yaml"
        )
    return manifest


def _check_runnable(cells: list[Cell], knobs: Mapping[str, str]) -> None:
    """Refuse up front a policy, task or config that no worker could ever run."""
    try:
        policy_dir(knobs["POLICY"])
        bench = load_benchmark(knobs["BENCHMARK"])
        for cell in cells:
            bench.check(cell.task, knobs["BENCH_CONFIG"])
    except (PolicyError, ValueError) as exc:
        raise ManifestError(str(exc)) from None


def create_run(run_dir: Path | str, queue_file: Path | str, env: Mapping[str, str] = os.environ) -> Manifest:
    run = RunDir(Path(run_dir))
    cells = read_queue(Path(queue_file))
    if not cells:
        raise QueueFileError(f"queue file {queue_file} lists no units")
    _check_runnable(cells, contract_knobs(env))
    contract = build_contract(cells, env)
    n = _eval_test_num(env)
    _check_bank_size(n, contract["seeds"], contract["knobs"]["SEEDS_ROOT"])
    if run.manifest.exists():
        return _same_run(run, contract, n)
    run.root.mkdir(parents=True, exist_ok=True)
    if Path(queue_file).resolve() != run.queue.resolve():
        tmp = run.queue.with_name(f".queue.txt.{os.getpid()}")
        shutil.copyfile(queue_file, tmp)
        os.replace(tmp, run.queue)
    shutil.rmtree(run.leases, ignore_errors=True)
    run.results.mkdir(exist_ok=True)
    run.logs.mkdir(exist_ok=True)
    manifest = Manifest(
        run=run.name,
        contract=contract,
        eval_test_num=n,
        history=[{"at": _now(), "kind": "create", "eval_test_num": n}],
        info={
            "created_at": _now(),
            "host": socket.gethostname(),
            "user": getpass.getuser(),
            "queue_source": str(Path(queue_file).resolve()),
            "seeds_dir": str(resolve_root(contract["knobs"]["SEEDS_ROOT"], _bundle(env))),
            "checkpoint_path": str(resolve_checkpoint(contract["knobs"]["CKPT_NAME"], _bundle(env)) or ""),
            "simulator": _simulator_versions(),
            **_git_version(),
        },
    )
    try:
        _write_yaml(run.manifest, manifest, exclusive=True)
    except FileExistsError:  # another launcher created it meanwhile
        return _same_run(run, contract, n)
    return manifest


def _same_run(run: RunDir, contract: dict[str, Any], n: int) -> Manifest:
    existing = load_manifest(run.root)
    differences = diff_contracts(existing.contract, contract, "this launch")
    if differences:
        raise ContractMismatch(
            f"run {run.root} already exists with a different contract; refusing to mix evals "
            "(use a new run name, or launch with the run's settings):",
            differences,
        )
    if n > existing.eval_test_num:
        raise ContractMismatch(
            f"run {run.root} already exists:",
            [
                f"EVAL_TEST_NUM: run.yaml has {existing.eval_test_num}, this launch has {n}; "
                "raising it is a fill-in (orchestrators/fillin.sh or scripts/new_run.py --fill-in)"
            ],
        )
    return existing


def _bank_entry(manifest: Manifest, seeds_root: str) -> tuple[dict[str, Any] | None, int] | None:
    """The (seeds section, EVAL_TEST_NUM limit) recorded for `seeds_root`, or None if unknown."""
    if seeds_root == manifest.knobs["SEEDS_ROOT"]:
        return manifest.contract["seeds"], manifest.eval_test_num
    for bank in manifest.fillin_banks:
        if bank["seeds_root"] == seeds_root:
            return bank["seeds"], int(bank["eval_test_num"])
    return None


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


def verify_environment(run_dir: Path | str, env: Mapping[str, str] = os.environ) -> str:
    run = RunDir(Path(run_dir))
    manifest = load_manifest(run.root)
    cells = read_queue(run.queue)
    seeds_root = env.get("SEEDS_ROOT", KNOBS["SEEDS_ROOT"].default)
    expected = manifest.contract
    entry = _bank_entry(manifest, seeds_root)
    if entry is not None and seeds_root != manifest.knobs["SEEDS_ROOT"]:
        expected = copy.deepcopy(manifest.contract)
        expected["knobs"]["SEEDS_ROOT"] = seeds_root
        expected["seeds"] = entry[0]
    try:
        actual = build_contract(cells, env)
    except (SeedBankError, ManifestError, FileNotFoundError) as exc:
        raise ContractMismatch(f"cannot verify the environment against {run.manifest}:", [str(exc)]) from None
    differences = diff_contracts(expected, actual, "the environment")
    n = _eval_test_num(env)
    limit = entry[1] if entry is not None else manifest.eval_test_num
    if n > limit:
        differences.append(
            f"EVAL_TEST_NUM: run.yaml allows {limit} for SEEDS_ROOT={seeds_root!r}, the environment has {n}; "
            "raise it with a fill-in (orchestrators/fillin.sh)"
        )
    differences += _sim_pin_problems(actual["knobs"]["SIM_PIN"])
    if differences:
        raise ContractMismatch(
            f"the environment does not match the run's contract ({run.manifest}):", differences
        )
    return contract_hash(manifest)


def _all_banks(manifest: Manifest, cells: list[Cell], bundle: str) -> dict[str, dict[Cell, list[int]]]:
    config = manifest.knobs["BENCH_CONFIG"]
    return {root: read_bank(resolve_root(root, bundle), cells, config) for root, _ in seed_banks(manifest)}


def record_fillin(
    run_dir: Path | str,
    eval_test_num: int | None = None,
    seeds_root: str | None = None,
    env: Mapping[str, str] = os.environ,
) -> Manifest:
    run = RunDir(Path(run_dir))
    manifest = load_manifest(run.root)
    if eval_test_num is None and seeds_root is None:
        raise ValueError("a fill-in needs a higher EVAL_TEST_NUM or a seed bank")
    if eval_test_num is not None and eval_test_num < 1:
        raise ValueError(f"EVAL_TEST_NUM={eval_test_num}: expected a positive integer")
    if manifest.contract["seeds"] is None and seeds_root is not None:
        raise ValueError(f"run {run.root} does not use seed banks (USE_EVAL_SEEDS=0): no bank to add")
    root = seeds_root if seeds_root is not None else manifest.knobs["SEEDS_ROOT"]
    entry = _bank_entry(manifest, root)
    if entry is None:
        seeds = _disjoint_bank(manifest, run, root, env)
        n = eval_test_num or seeds["min_per_unit"]
        _check_bank_size(n, seeds, root)
        manifest.fillin_banks.append({"seeds_root": root, "seeds": seeds, "eval_test_num": n})
        manifest.history.append(
            {
                "at": _now(),
                "kind": "seed_bank",
                "seeds_root": root,
                "sha256": seeds["sha256"],
                "eval_test_num": n,
            }
        )
    else:
        seeds, limit = entry
        n = eval_test_num or limit
        _check_bank_size(n, seeds, root)
        if n <= limit:
            return manifest  # already recorded: re-running a fill-in changes nothing
        manifest.history.append(
            {"at": _now(), "kind": "eval_test_num", "seeds_root": root, "from": limit, "to": n}
        )
        if root == manifest.knobs["SEEDS_ROOT"]:
            manifest.eval_test_num = n
        else:
            next(b for b in manifest.fillin_banks if b["seeds_root"] == root)["eval_test_num"] = n
    _write_yaml(run.manifest, manifest, exclusive=False)
    return manifest


def _disjoint_bank(manifest: Manifest, run: RunDir, root: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The seeds section of a new bank, after checking it shares no seed with the run's banks."""
    cells = read_queue(run.queue)
    bundle = _bundle(env)
    config = manifest.knobs["BENCH_CONFIG"]
    bank = read_bank(resolve_root(root, bundle), cells, config)
    overlaps = []
    for other_root, other in _all_banks(manifest, cells, bundle).items():
        for cell in cells:
            shared = sorted(set(bank[cell]) & set(other[cell]))
            if shared:
                overlaps.append(f"{cell.scene} {cell.task}: seeds {shared[:5]} are also in {other_root}")
    if overlaps:
        raise ContractMismatch(f"seed bank {root} is not disjoint from the run's banks:", overlaps)
    return {"sha256": bank_sha256(bank, config), "min_per_unit": min(len(s) for s in bank.values())}


def seed_banks(manifest: Manifest) -> list[tuple[str, int]]:
    """(SEEDS_ROOT, EVAL_TEST_NUM) of each bank the run draws from: the original first, then fill-ins."""
    return [(manifest.knobs["SEEDS_ROOT"], manifest.eval_test_num)] + [
        (b["seeds_root"], int(b["eval_test_num"])) for b in manifest.fillin_banks
    ]


def _additions(manifest: Manifest) -> list[tuple[str, int, int]]:
    """(SEEDS_ROOT, lo, hi) of the bank seeds each recorded step added, in the order they were added."""
    original = manifest.knobs["SEEDS_ROOT"]
    steps = []
    for event in manifest.history:
        if event["kind"] == "create":
            steps.append((original, 0, int(event["eval_test_num"])))
        elif event["kind"] == "seed_bank":
            steps.append((event["seeds_root"], 0, int(event["eval_test_num"])))
        elif event["kind"] == "eval_test_num":
            steps.append((event.get("seeds_root", original), int(event["from"]), int(event["to"])))
    return steps


def planned_seeds(
    run_dir: Path | str,
    manifest: Manifest | None = None,
    env: Mapping[str, str] = os.environ,
) -> dict[Cell, list[int]]:
    """Each unit's seeds over every bank of the run, in the order the run's history added them.

    Append-only order matters: a unit slice covers an index range of this list, so seeds added by a
    fill-in must never shift the seeds already planned (a finished slice would then stand for others).
    """
    run = RunDir(Path(run_dir))
    manifest = manifest or load_manifest(run.root)
    cells = read_queue(run.queue)
    if manifest.contract["seeds"] is None:
        return {cell: list(range(manifest.eval_test_num)) for cell in cells}
    config, bundle = manifest.knobs["BENCH_CONFIG"], _bundle(env)
    banks = {root: read_bank(resolve_root(root, bundle), cells, config) for root, _ in seed_banks(manifest)}
    steps = _additions(manifest)
    return {cell: [s for root, lo, hi in steps for s in banks[root][cell][lo:hi]] for cell in cells}
