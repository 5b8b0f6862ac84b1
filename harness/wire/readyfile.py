"""Ready files: how a listening process tells others where it is, and how they wait for it.

Written atomically (temp file + rename, mode 0600 because it may hold a token) only once the
listener is ready to serve, so a reader never sees a half-written file or a port nobody answers.
Also what goes into one: the listening socket for a bind address (IPv4 or IPv6), whether that
address needs a token, and the host others should dial.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any

from harness.wire.errors import WireError


def write_ready(path: str | Path, info: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    os.replace(tmp, path)


def read_ready(path: str | Path) -> dict[str, Any]:
    try:
        info = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise WireError(f"ready file {path}: cannot read it: {exc}") from None
    if not isinstance(info, dict) or not isinstance(info.get("port"), int) or "host" not in info:
        raise WireError(f"ready file {path}: expected JSON with host and port, got {info!r:.120}")
    return info


def wait_ready(path: str | Path, timeout_s: float) -> dict[str, Any]:
    """The ready file's content once it exists; WireError naming the path after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise WireError(f"ready file {path} did not appear within {timeout_s:.3g} s")
        time.sleep(0.05)
    return read_ready(path)


def remove_ready(path: str | Path, pid: int | None = None) -> None:
    """Remove the ready file if it is (still) ours: a successor's file is left alone."""
    try:
        if pid is None or read_ready(path).get("pid") == pid:
            Path(path).unlink()
    except (OSError, WireError):
        pass


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_token(bind: str) -> str | None:
    """The per-run token a non-loopback listener demands: MODEL_SERVER_TOKEN, else a fresh one."""
    if is_loopback(bind):
        return None
    return os.environ.get("MODEL_SERVER_TOKEN") or secrets.token_hex(16)


def advertised_host(bind: str) -> str:
    """The address others should dial: a wildcard bind (`0.0.0.0`, `::`, empty) is reachable at
    this host's name; any other bind at itself (`::1` for the IPv6 loopback)."""
    return socket.getfqdn() if bind in ("0.0.0.0", "::", "") else bind


def listen_socket(bind: str, backlog: int | None = None) -> socket.socket:
    """A TCP socket listening on (bind, an ephemeral port), in the family the address is written in.

    An IPv6 address (`::1`, `::`) gets an IPv6 socket, and `::` also takes IPv4 clients where the
    system allows dual stack; a name listens on the first address it resolves to; empty is every
    IPv4 interface; `backlog` None is the system's default. OSError (an unknown name, an address
    this host lacks) is the caller's to report.
    """
    return socket.create_server(
        (bind, 0),
        family=_family(bind),
        backlog=backlog,
        dualstack_ipv6=bind == "::" and socket.has_dualstack_ipv6(),
    )


def _family(bind: str) -> socket.AddressFamily:
    if not bind:
        return socket.AF_INET
    try:
        version = ipaddress.ip_address(bind.partition("%")[0]).version  # `fe80::1%eth0` has a scope
    except ValueError:
        return socket.getaddrinfo(bind, 0, type=socket.SOCK_STREAM)[0][0]
    return socket.AF_INET6 if version == 6 else socket.AF_INET
