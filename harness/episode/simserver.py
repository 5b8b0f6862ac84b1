"""The sim process: one process for many units.

A fresh process per unit would pay the Python imports and the renderer's start-up (about 10 s on
the CPU renderer) before its first episode, once per unit. A worker therefore starts its sim
process once (`eval_policy_client.py`) and hands it one unit at a time: one JSON line on stdin per
unit (`{"run_dir", "scene", "task", "seeds", "writer_id", "progress_file"}`), answered, when the
unit ends, by one line `UNIT_END {"returncode": <the unit's status>, "pid": <pid>}` on stdout.
Everything else on stdout is the unit's log. Stdin closed: the process exits 0.

A unit runs as `run_assignment` runs it: the code check against the run's
contract (a run dir whose run.yaml cannot be read is refused like a code mismatch: no episode runs
outside a contract), a fresh connection to the model server, then `SimClient`. Only the benchmark object (and
with it the imports, the render system and its kept envs, SIM_ENV_CACHE) outlives the unit. Before
its first assignment the process warms the benchmark up (`warm_up`, where the adapter has one: ManiSkill
renders a first frame), which the worker overlaps with its model server's load; a warm-up that
fails ends the process with NO_BENCHMARK before any assignment (this node cannot run the benchmark). A
process started for one run (`--canary-run`, as a worker starts it) runs that run's canary
(`harness.episode.canary`) in its warm-up too, after the run's code check, writing the progress file
at each step; its line goes to the first unit's log. It hides behind the model server's load as far
as that load outlasts the warm-up (docs/trust.md, "Measured here").
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import IO, Any

from harness.config.contract import CODE_REFUSED_EXIT, check_code
from harness.config.manifest import ContractMismatch, ManifestError, load_manifest
from harness.config.policymap import load_policy_map
from harness.config.settings import Settings
from harness.episode import canary
from harness.episode.bench import Benchmark
from harness.episode.external import ExternalPolicyClient
from harness.episode.simclient import SimAssignment, SimClient
from harness.process.failures import Refused
from harness.wire.client import PolicyClient
from harness.wire.errors import PeerClosed, WireError

UNIT_END = "UNIT_END "  # the prefix of the answer line that ends a unit
# A unit's statuses (its UNIT_END returncode; NO_BENCHMARK and CANNOT_START also the process's exit
# status before any assignment), which the worker reads as a cause (harness/worker/faults.py): no model
# server, a refused pairing or a malformed assignment; the server lost mid-unit; the benchmark or its
# renderer cannot start on this node; the worker was stopped (SIGSTOP) mid-unit, so the seed running
# then and those after it have no record.
CANNOT_START, LOST_SERVER, NO_BENCHMARK, WORKER_STOPPED = 2, 3, 4, 6
ASSIGNMENT_FIELDS = ("run_dir", "scene", "task", "seeds", "writer_id")


def run_assignment(
    settings: Settings, bench: Benchmark, assignment: SimAssignment, ready_file: Path, connect_timeout: float,
    report: Callable[[str], None], complain: Callable[[str], None] | None = None,
) -> int:  # fmt: skip
    """Run one unit against the model server found through `ready_file`; the unit's status.
    `report` gets each episode's line, `complain` (default: `report`) why the unit could not run."""
    dial = partial(connect, settings, ready_file, connect_timeout, assignment.run_dir)
    return run_assignment_via(settings, bench, assignment, dial, report, complain)


def run_assignment_via(
    settings: Settings, bench: Benchmark, assignment: SimAssignment,
    connector: Callable[[], PolicyClient | ExternalPolicyClient],
    report: Callable[[str], None], complain: Callable[[str], None] | None = None,
) -> int:  # fmt: skip
    """`run_assignment` with the connection made by `connector` (called after the code check; hello not
    yet sent): the in-process debug mode passes one that hands over one end of a socketpair."""
    complain = complain or report
    try:  # reading run.yaml decides: a missing one is refused, never taken for "no contract"
        check_code(assignment.run_dir)
    except (ContractMismatch, ManifestError) as exc:
        complain(f"eval_policy_client: refusing to run: {exc}")
        return CODE_REFUSED_EXIT
    try:
        client = connector()
    except (ValueError, Refused, WireError, OSError) as exc:
        complain(f"eval_policy_client: cannot start: {exc}")
        return CANNOT_START
    with client:
        sim = SimClient(bench, client, assignment, settings)
        try:
            sim.run(report=report)
        except (PeerClosed, ConnectionError, TimeoutError) as exc:
            complain(f"eval_policy_client: lost the model server: {exc}")
            return LOST_SERVER
        except WireError as exc:  # the hello refused the pairing (spec or version mismatch)
            complain(f"eval_policy_client: {exc}")
            return CANNOT_START
    return WORKER_STOPPED if sim.worker_stopped else 0


def connect(
    settings: Settings, ready_file: Path, timeout_s: float, run_dir: Path
) -> PolicyClient | ExternalPolicyClient:
    """A connection to the model server (or, with SIM_AS_SERVER=1, from it; or to POLICY_SERVER, an
    external openpi / vla-eval server), hello not yet sent."""
    if settings.policy_server:
        return external_client(settings, run_dir)
    wire = {"codec": settings.wire_codec, "max_frame": settings.wire_max_frame, "timeout_s": timeout_s}
    if settings.sim_as_server:
        return PolicyClient.listen(ready_file, bind=settings.model_server_bind, **wire)
    return PolicyClient.from_ready_file(ready_file, host=settings.model_server_host or None, **wire)


def external_client(settings: Settings, run_dir: Path) -> ExternalPolicyClient:
    """POLICY_SERVER's client; its metadata must be what the run's contract recorded, if it did."""
    section = load_manifest(run_dir).contract.get("policy_server")
    expect = section.get("metadata_sha256") if isinstance(section, dict) else None
    mapping = load_policy_map(settings.policy_server_map or "POLICY_SERVER_MAP is not set")
    return ExternalPolicyClient(settings.policy_server, mapping, settings, expect)


def parse_assignment(line: str, worker_pid: int | None) -> SimAssignment:
    """One assignment line → a SimAssignment; a malformed line is a ValueError naming what is wrong."""
    try:
        raw: Any = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"assignment line is not JSON ({exc}): {line[:200]!r}") from None
    if not isinstance(raw, dict) or (missing := [f for f in ASSIGNMENT_FIELDS if f not in raw]):
        raise ValueError(
            f"assignment line lacks {', '.join(missing) if isinstance(raw, dict) else 'an object'}"
        )
    seeds = raw["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ValueError(f"assignment line: seeds must be a non-empty list of integers, got {seeds!r}")
    progress = raw.get("progress_file")
    return SimAssignment(
        Path(raw["run_dir"]), str(raw["scene"]), str(raw["task"]), seeds, str(raw["writer_id"]),
        Path(progress) if progress else None, worker_pid,
    )  # fmt: skip


def answer(out: IO[str], returncode: int) -> None:
    out.write(UNIT_END + json.dumps({"returncode": returncode, "pid": os.getpid()}) + "\n")
    out.flush()


def warm_up(bench: Benchmark, complain: Callable[[str], None]) -> bool:
    """Run the adapter's optional `warm_up()` (the renderer's start-up, paid before any unit); False,
    said, when it failed: this node cannot run the benchmark, no unit could run here."""
    warm = getattr(bench, "warm_up", None)
    if warm is None:
        return True
    try:
        warm()
    except Exception as exc:
        complain(f"eval_policy_client: cannot start: the benchmark's warm-up failed: {exc!r}")
        return False
    return True


def warm_canary(
    settings: Settings, bench: Benchmark, run_dir: Path, progress_file: Path | None,
    said: Callable[[str], None],
) -> None:  # fmt: skip
    """The run's canary in the warm-up, before any assignment (`canary.run_once`): only once the run's code
    check passes (a refused run runs nothing, its first assignment says why). Each step replaces the
    progress file, as the sim client's canary does: the worker's stall watch sees it move."""
    try:
        check_code(run_dir)
    except Exception:  # ContractMismatch, ManifestError, an unreadable run dir: no canary here
        return  # the first assignment is refused, and says why
    started = time.time()

    def on_step(step: int) -> None:
        if progress_file is None:
            return
        tmp = progress_file.with_name(progress_file.name + ".tmp")
        tmp.write_text(json.dumps({"seed": None, "step": int(step), "started_at": started}))
        tmp.replace(progress_file)

    canary.run_once(bench, settings, run_dir, said, on_step=on_step)


def serve(
    settings: Settings, bench: Benchmark, ready_file: Path, connect_timeout: float, worker_pid: int | None,
    assignments: IO[str] = sys.stdin, out: IO[str] = sys.stdout, canary_run: Path | None = None,
    progress_file: Path | None = None,
) -> int:  # fmt: skip
    """Run each assignment line read from `assignments` as a unit and answer it; 0 when `assignments`
    ends, NO_BENCHMARK (no assignment read) when the benchmark cannot warm up. With `canary_run`, that
    run's canary runs in the warm-up (`warm_canary`); what it said is reported at the first assignment
    (a line before it is lost)."""

    def report(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    if not warm_up(bench, lambda line: print(line, file=sys.stderr, flush=True)):
        return NO_BENCHMARK
    early: list[str] = []
    if canary_run is not None:
        warm_canary(settings, bench, canary_run, progress_file, early.append)
    for line in assignments:
        if not line.strip():
            continue
        for said in early:
            report(said)
        early.clear()
        try:
            assignment = parse_assignment(line, worker_pid)
        except ValueError as exc:
            report(f"eval_policy_client: {exc}")
            answer(out, CANNOT_START)
            continue
        answer(out, run_assignment(settings, bench, assignment, ready_file, connect_timeout, report))
    return 0
