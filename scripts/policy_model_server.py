"""Persistent model server: load a policy once, then serve sim clients over the wire protocol.

Listens on MODEL_SERVER_BIND (default 127.0.0.1), port 0, and publishes host/port/pid (and a token
for a non-loopback bind) in --ready-file once the model is loaded. With --connect the model side
dials a listening sim side instead (SIM_AS_SERVER=1). MODEL_SERVER_PROTOCOL=openpi serves openpi
clients (WebSocket, harness.model.openpi_server) instead, MODEL_SERVER_PROTOCOL=vlaeval vla-eval's
runner (WebSocket, harness.model.vlaeval_server). SIGTERM/SIGINT: clean exit 0.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from typing import TYPE_CHECKING

from harness.config import knobs
from harness.config.policymap import PolicyMapError, load_policy_map
from harness.config.settings import Settings
from harness.model.dialout import connect_out
from harness.model.policyload import LoadedPolicy, PolicyRefused, load_policy
from harness.model.server import ModelServer
from harness.process.failures import run_command
from harness.process.stopsignals import StopSignals
from harness.wire.errors import WireError
from harness.wire.readyfile import write_ready

if TYPE_CHECKING:
    from harness.model.openpi_server import OpenpiServer
    from harness.model.vlaeval_server import VlaEvalServer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default=knobs.get("POLICY"), help="name under policy/, or a wrapper directory")
    p.add_argument(
        "--ckpt", default=knobs.get("CKPT_NAME"), help="checkpoint path or name under $BUNDLE/checkpoints"
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=knobs.get("POLICY_ARGS").split(),
        metavar="KEY=VALUE",
        help="override a deploy_policy.yml setting (repeatable; also POLICY_ARGS)",
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--ready-file", help="listen, and publish where in this file")
    mode.add_argument(
        "--connect",
        metavar="HOST:PORT|READY_FILE",
        help="sim-as-server: dial HOST:PORT (or [IPv6]:PORT) once, or each sim client publishing READY_FILE",
    )
    p.add_argument(
        "--info-file", help="with --connect: once the policy is loaded, write its pid, policy and ckpt here"
    )
    p.add_argument("--connect-timeout", type=float, default=300.0, help="seconds to keep dialling the target")
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p.parse_args(argv)


def listener(
    policy: LoadedPolicy, ready_file: str, settings: Settings
) -> ModelServer | OpenpiServer | VlaEvalServer:
    """The server MODEL_SERVER_PROTOCOL asks for: ours, or one that openpi clients or vla-eval's
    runner can talk to. A WebSocket front end (and the websockets package) is imported only when
    asked for, so that the native server runs where websockets is not installed (a GPU machine's
    image: docs/performance.md, "The GPU check")."""
    chosen = settings.model_server_protocol
    if chosen == "native":
        return ModelServer(policy, ready_file, settings)
    if chosen == "vlaeval":
        from harness.model.vlaeval_server import VlaEvalServer

        return VlaEvalServer(policy, ready_file, settings)
    from harness.model.openpi_server import OpenpiServer

    path = settings.model_server_map
    policy_map = load_policy_map(path, "MODEL_SERVER_MAP") if path else None
    return OpenpiServer(policy, ready_file, settings, policy_map=policy_map)


def serve(args: argparse.Namespace, policy: LoadedPolicy, settings: Settings) -> None:
    """Serve until SIGTERM/SIGINT, which only raise a flag (harness.process.stopsignals): the
    server's shutdown runs in the flag's watcher thread, never inside the signal handler."""
    server = None if args.connect else listener(policy, args.ready_file, settings)
    signals = StopSignals(on_stop=None if server is None else lambda signum: server.shutdown())
    try:
        if server is not None:
            server.serve_forever()
            return
        if args.info_file:
            write_ready(args.info_file, {"pid": os.getpid(), "policy": policy.name, "ckpt": policy.ckpt})
        # dialled out: recv waits for the sim and no flag interrupts it, so a stop signal just ends us
        signals.run_until_stopped(
            functools.partial(
                connect_out, policy, settings, args.connect, args.connect_timeout, signals.stopped
            )
        )
    finally:
        signals.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = Settings.from_env(os.environ)
        serve(args, load_policy(args.policy, args.ckpt, args.overrides, settings), settings)
    except (PolicyRefused, PolicyMapError, WireError, ValueError) as exc:
        print(f"policy_model_server: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(run_command("policy_model_server", main, failures=(WireError,)))
