"""The in-process debug mode: one episode with the sim and the policy in this one Python process.

`scripts/eval_one_worker.py --inprocess`, in the spirit of submitit's DebugExecutor, one step past
the debug worker (`harness.launch.debug`, which runs the real worker here but its model server and
sim client as child processes). Here nothing is started: the policy is loaded in this process as the
model server loads it (`load_policy`), the server's per-connection handler
(`harness.model.server.serve_connection`) answers in a thread on one end of a `socket.socketpair()`,
and the sim side's unit runner (`harness.episode.simserver.run_assignment_via`: the code check, the hello,
`SimClient`) runs in the calling thread on the other end. Real frames cross the real wire code, and
the record goes to the run's results like any other (its own writer id, `inprocess`). It takes no
lease: the run should not have a pool running on it at the same time.

Breakpoints: the sim side runs in the calling thread; the policy's thread inherits the debugger's
trace function when one is active, so a breakpoint set from pdb in a wrapper's `deploy_policy.py`
or in harness/model stops there as well, and `breakpoint()` works anywhere. While one side sits at
a breakpoint the other waits: the sim side up to DEBUG_IO_TIMEOUT_S for a reply, the model side
the server's IDLE_TIMEOUT_S (an hour) for the next request.
"""

from __future__ import annotations

import dataclasses
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from harness.config.contract import verify_environment
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.bench import load_benchmark
from harness.episode.simclient import SimAssignment
from harness.episode.simserver import run_assignment_via
from harness.launch.newrun import new_run
from harness.model.policyload import LoadedPolicy, load_policy
from harness.model.server import serve_connection
from harness.queue.units import Unit
from harness.runqueue import run_units
from harness.wire.client import PolicyClient
from harness.worker.unit_records import missing_seeds

WRITER_ID = "inprocess"  # names this mode's own record file
DEBUG_IO_TIMEOUT_S = 24 * 3600.0  # the sim side's wait for a reply: the policy may sit at a breakpoint
JOIN_TIMEOUT_S = 30.0  # the model thread ends when the sim side closes its end

Trace = Callable[[FrameType, str, Any], Any]


class InProcessServer:
    """The model server's connection handler for `policy`, run in a thread of this process: each
    `connect()` makes a socketpair, serves one end in a new thread, returns a client on the other."""

    def __init__(self, policy: LoadedPolicy, settings: Settings) -> None:
        self.policy, self.settings = policy, settings
        self.threads: list[threading.Thread] = []

    def connect(self) -> PolicyClient:
        """A client (hello not yet sent) whose peer is `serve_connection` in a thread of this process."""
        sim_end, model_end = socket.socketpair()
        thread = threading.Thread(
            target=self._serve, args=(model_end, sys.gettrace()), name="inprocess-model", daemon=True
        )
        thread.start()
        self.threads.append(thread)
        return PolicyClient(
            sim_end, io_timeout_s=DEBUG_IO_TIMEOUT_S, codec=self.settings.wire_codec,
            max_frame=self.settings.wire_max_frame,
        )  # fmt: skip

    def _serve(self, conn: socket.socket, trace: Trace | None) -> None:
        if trace is not None:  # a debugger traces the caller: let its breakpoints stop in the policy too
            sys.settrace(trace)
        try:
            serve_connection(conn, self.policy, self.settings)
        finally:  # whatever ended the handler, the sim side sees the peer gone, never waits for a reply
            conn.close()

    def join(self) -> None:
        """Wait for the model threads, which end once the sim side has closed its ends."""
        for thread in self.threads:
            thread.join(JOIN_TIMEOUT_S)


def choose_episode(
    run: RunDir, policy: LoadedPolicy, task: str | None = None, scene: str | None = None,
    seed: int | None = None,
) -> tuple[Unit, int]:  # fmt: skip
    """The unit and seed to run: the first unit of `task`/`scene` (any when None) that plans `seed`;
    without a seed, the first seed with no result yet (the unit's first when all have one).
    A task, scene or seed the run does not plan is a ValueError naming what it does plan."""
    units = [u for u in run_units(run) if task in (None, u.task) and scene in (None, u.scene)]
    what = " ".join(f"{name} {value}" for name, value in (("scene", scene), ("task", task)) if value)
    if not units:
        planned = sorted({f"{u.scene} {u.task}" for u in run_units(run)})
        raise ValueError(f"run {run.root}: no unit of {what} in its queue (it has: {', '.join(planned)})")
    if seed is not None:
        for unit in units:
            if seed in unit.seeds:
                return unit, seed
        planned = sorted({s for u in units for s in u.seeds})
        raise ValueError(f"run {run.root}: seed {seed} is not planned for {what or 'any unit'} "
                         f"(planned: {' '.join(map(str, planned))})")  # fmt: skip
    for unit in units:
        result_dir = run.result_dir(unit.task, policy.name, unit.task_config, policy.ckpt)
        missing = missing_seeds(result_dir, unit)
        if missing:
            return unit, missing[0]
    return units[0], units[0].seeds[0]


def run_inprocess(
    settings: Settings, run: RunDir, queue_file: Path, task: str | None = None, scene: str | None = None,
    seed: int | None = None, report: Callable[[str], None] = print,
    complain: Callable[[str], None] | None = None,
) -> int:  # fmt: skip
    """Create or check the run, then run one episode of it here, sim and policy in this process;
    the sim client's exit status (0: the episode has its record)."""
    if settings.policy_server:
        raise ValueError("POLICY_SERVER is set: --inprocess runs the policy under policy/ in this process")
    new_run(run.root, queue_file)
    settings = dataclasses.replace(settings, contract=verify_environment(run.root))  # every record carries it
    bench = load_benchmark(settings.benchmark, settings)
    policy = load_policy(settings.policy, settings.ckpt_name, list(settings.policy_args), settings)
    unit, chosen = choose_episode(run, policy, task, scene, seed)
    report(f"in-process: {unit.scene} {unit.task} seed {chosen} ({policy.name}, this process only)")
    server = InProcessServer(policy, settings)
    try:
        assignment = SimAssignment(run.root, unit.scene, unit.task, [chosen], WRITER_ID)
        code = run_assignment_via(settings, bench, assignment, server.connect, report, complain)
    finally:
        server.join()
    if code == 0:
        record_file = run.record_file(unit.task, policy.name, unit.task_config, policy.ckpt, WRITER_ID)
        report(f"record: {record_file}")
    return code
