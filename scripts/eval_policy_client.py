"""Sim client: run the seeds of one unit (scene, task) against a model server, one record per seed.

Knobs (BENCHMARK, BENCH_CONFIG, IMAGE_SIZE, EXEC_ACTIONS, ACTION_SMOOTH, RECORD_VIDEO, ...) come from
the environment. Records go to this writer's own metrics file in the run dir, videos next to it.
Exit 0 when every seed has a record (errored episodes included); 2 when it cannot run at all (bad
arguments, no model server, spec mismatch); 3 when the connection to the server is lost mid-unit;
5 (no episode run) when the code it runs is not the code the run's contract hashed.
With POLICY_SERVER set it talks to that external openpi or vla-eval server (mapping:
POLICY_SERVER_MAP) instead of the one in --ready-file.

Example:
  $SIM_PY scripts/eval_policy_client.py --run-dir runs/demo --scene table --task PickCube \\
      --seeds 0 1 --ready-file /tmp/server.ready --writer-id w0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.config import knobs
from harness.config.contract import CODE_REFUSED_EXIT, check_code
from harness.config.failures import Refused, run_command
from harness.config.manifest import ContractMismatch, load_manifest
from harness.config.policymap import load_policy_map
from harness.config.rundir import RunDir
from harness.episode.bench import load_benchmark
from harness.episode.external import ExternalPolicyClient
from harness.episode.simclient import SimClient, SimJob
from harness.wire.client import PolicyClient
from harness.wire.errors import PeerClosed, WireError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", type=Path, required=True, help="the run directory")
    p.add_argument("--scene", required=True, help="scene of the unit (ManiSkill: table)")
    p.add_argument("--task", required=True, help="task of the unit, e.g. PickCube")
    p.add_argument("--seeds", type=int, nargs="+", required=True, help="episode seeds to run, in order")
    p.add_argument(
        "--ready-file", type=Path, required=True, help="model server's ready file (ours with SIM_AS_SERVER=1)"
    )
    p.add_argument("--writer-id", required=True, help="this writer's id: names its own metrics file")
    p.add_argument("--progress-file", type=Path, help='replaced each step with {"seed": N, "step": K}')
    p.add_argument("--worker-pid", type=int, help="start no new episode while this process is stopped")
    p.add_argument(
        "--connect-timeout", type=float, default=300.0, help="seconds to wait for the server (300)"
    )
    return p.parse_args(argv)


def external_client(run_dir: Path) -> ExternalPolicyClient:
    """POLICY_SERVER's client; its metadata must be what the run's contract recorded, if it did."""
    run = RunDir(run_dir)
    section = load_manifest(run.root).contract.get("policy_server") if run.manifest.exists() else None
    expect = section.get("metadata_sha256") if isinstance(section, dict) else None
    mapping = load_policy_map(knobs.get("POLICY_SERVER_MAP") or "POLICY_SERVER_MAP is not set")
    return ExternalPolicyClient(knobs.get("POLICY_SERVER"), mapping, expect)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if RunDir(args.run_dir).manifest.exists():
        try:
            check_code(args.run_dir)
        except ContractMismatch as exc:
            print(f"eval_policy_client: refusing to run: {exc}", file=sys.stderr)
            return CODE_REFUSED_EXIT
    try:
        bench = load_benchmark(knobs.get("BENCHMARK"))
        wire = {"codec": knobs.get("WIRE_CODEC"), "max_frame": knobs.get_int("WIRE_MAX_FRAME")}
        if knobs.get("POLICY_SERVER"):
            client: PolicyClient | ExternalPolicyClient = external_client(args.run_dir)
        elif knobs.get_bool("SIM_AS_SERVER"):
            bind = knobs.get("MODEL_SERVER_BIND")
            client = PolicyClient.listen(args.ready_file, timeout_s=args.connect_timeout, bind=bind, **wire)
        else:
            host = knobs.get("MODEL_SERVER_HOST") or None
            client = PolicyClient.from_ready_file(
                args.ready_file, timeout_s=args.connect_timeout, host=host, **wire
            )
    except (ValueError, Refused, WireError, OSError) as exc:
        print(f"eval_policy_client: cannot start: {exc}", file=sys.stderr)
        return 2
    unit = SimJob(
        args.run_dir, args.scene, args.task, args.seeds, args.writer_id, args.progress_file, args.worker_pid
    )
    with client:
        try:
            SimClient(bench, client, unit).run(report=lambda line: print(line, flush=True))
        except (PeerClosed, ConnectionError, TimeoutError) as exc:
            print(f"eval_policy_client: lost the model server: {exc}", file=sys.stderr)
            return 3
        except WireError as exc:  # the hello refused the pairing (spec or version mismatch)
            print(f"eval_policy_client: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(run_command("eval_policy_client", main))
