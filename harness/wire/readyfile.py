"""Ready files: how a listening process tells others where it is, and how they wait for it.

Written atomically (temp file + rename, mode 0600 because it may hold a token) only once the
listener is ready to serve, so a reader never sees a half-written file or a port nobody answers.
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
    """The address others should dial: a wildcard bind is reachable at this host's name."""
    return socket.getfqdn() if bind in ("0.0.0.0", "::", "") else bind
