"""Sim-as-server (SIM_AS_SERVER=1): the model side dials the listening sim side and serves it.

`policy_model_server.py --connect TARGET`: TARGET is HOST:PORT or [IPv6]:PORT (one connection), or
a sim ready file (each sim client that publishes it, one after another). Each connection is served
by `harness.model.server.serve_connection`, exactly as an accepted one.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from harness.config.settings import Settings
from harness.model.policyload import LoadedPolicy
from harness.model.server import serve_connection
from harness.wire.errors import WireError
from harness.wire.readyfile import read_ready


def connect_out(
    policy: LoadedPolicy,
    settings: Settings,
    target: str | Path,
    timeout_s: float,
    stop: threading.Event | None = None,
) -> None:
    """Sim-as-server: dial the sim side and serve it.

    `target` is HOST:PORT (serve one connection), or a sim ready file: then serve each sim client
    that publishes it, one after another, until `stop` is set (the worker starts one per unit).
    """
    stop = stop or threading.Event()
    if isinstance(target, str) and ":" in target and not Path(target).exists():
        host, port = parse_target(target)
        serve_connection(_dial(host, port, timeout_s, stop), policy, settings)
        return
    served: set[tuple[str, int, int]] = set()
    while not stop.is_set():
        try:
            info = read_ready(target)
        except WireError:
            time.sleep(0.1)
            continue
        key = (info["host"], info["port"], info.get("pid", 0))
        if key in served:
            time.sleep(0.1)
            continue
        try:
            conn = socket.create_connection((info["host"], info["port"]), timeout=5.0)
        except OSError:
            time.sleep(0.1)
            continue
        served.add(key)
        serve_connection(conn, policy, settings, reply_token=info.get("token"))


def parse_target(target: str) -> tuple[str, int]:
    """`HOST:PORT` or `[IPv6]:PORT` → (host, port); a WireError naming `target` otherwise."""
    host, _, port = target.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise WireError(f"--connect {target!r}: expected HOST:PORT, [IPv6]:PORT or a sim ready file")
    return host, int(port)


def _dial(host: str, port: int, timeout_s: float, stop: threading.Event) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((host, port), timeout=5.0)
        except OSError as exc:
            if stop.is_set() or time.monotonic() > deadline:
                raise WireError(f"cannot reach the sim side at {host}:{port}: {exc}") from None
            time.sleep(0.2)
