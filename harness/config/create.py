"""Creating a run: copy the queue file to `queue.txt`, clear the leases and write `run.yaml`.

Re-creating an existing run with the same contract returns its manifest untouched; with a different
contract, or a higher EVAL_TEST_NUM (that is a fill-in), it raises `ContractMismatch`. Whether a
policy and benchmark can run at all is checked above this stage (`harness.launch.newrun`), where
the benchmark and policy loaders may be imported.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.config.contract import (
    adopt_unit_seeds,
    build_contract,
    check_bank_size,
    diff_contracts,
    eval_test_num,
)
from harness.config.manifest import (
    ContractMismatch,
    Manifest,
    ManifestError,
    load_manifest,
    now_iso_seconds,
    write_manifest,
)
from harness.config.paths import bundle_root, resolve_checkpoint
from harness.config.plan import resolve_unit_seeds
from harness.config.policyserver import ServerProbe
from harness.config.rundir import QueueFileError, RunDir, read_queue
from harness.config.seedbank import resolve_root
from harness.config.stoprule import BASELINE_INFO, check_stop_rule


def create_run(
    run_dir: Path | str,
    queue_file: Path | str,
    env: Mapping[str, str] = os.environ,
    step_limits: Mapping[str, int] | None = None,
    probe: ServerProbe | None = None,
    code_version: Callable[[], Mapping[str, str]] | None = None,
) -> Manifest:
    """`step_limits`: each task's episode step limit where the benchmark says (kept in `info`: the
    expected cost of units nobody has run yet, `harness.worker.episode_costs`); `probe`: reads
    POLICY_SERVER's section (`harness.episode.serverdial.probe`); `code_version`: gives the code's git
    commit and description, kept in `info`, when the run is written (the launcher asks git:
    nothing here starts a process)."""
    run = RunDir(Path(run_dir))
    cells = read_queue(Path(queue_file))
    if not cells:
        raise QueueFileError(f"queue file {queue_file} lists no units")
    contract = build_contract(cells, env, probe)
    n = eval_test_num(env)
    check_bank_size(n, contract["seeds"], contract["knobs"]["SEEDS_ROOT"])
    try:
        unit_seeds, unit_split = resolve_unit_seeds(contract["knobs"]["UNIT_SEEDS"], len(cells), n, env)
    except ValueError as exc:
        raise ManifestError(str(exc)) from None
    rule = check_stop_rule(contract, n, env)
    if run.manifest.exists():
        return _same_run(run, contract, n)
    contract["knobs"]["UNIT_SEEDS"] = unit_seeds  # frozen as the number: every worker cuts these units
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
        history=[{"at": now_iso_seconds(), "kind": "create", "eval_test_num": n}],
        info={
            "created_at": now_iso_seconds(),
            "host": socket.gethostname(),
            "user": getpass.getuser(),
            "queue_source": str(Path(queue_file).resolve()),
            "seeds_dir": str(resolve_root(contract["knobs"]["SEEDS_ROOT"], str(bundle_root(env)))),
            "checkpoint_path": str(resolve_checkpoint(contract["knobs"]["CKPT_NAME"], env) or ""),
            "unit_split": unit_split,
            **({"step_limits": dict(step_limits)} if step_limits else {}),
            **({BASELINE_INFO: rule.baseline_path} if rule.baseline_path else {}),
            **(code_version() if code_version else {}),
        },
    )
    try:
        write_manifest(run.manifest, manifest, exclusive=True)
    except FileExistsError:  # another launcher created it meanwhile
        return _same_run(run, contract, n)
    return manifest


def _same_run(run: RunDir, contract: dict[str, Any], n: int) -> Manifest:
    existing = load_manifest(run.root)
    adopt_unit_seeds(existing.contract, contract)
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
