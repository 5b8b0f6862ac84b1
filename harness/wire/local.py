"""Same-host connections over a Unix socket, beside the TCP listener every model server has.

Why: on this kind of machine a Python ping-pong over TCP loopback takes ~46 µs a round trip and
over a Unix socket ~5 µs (`benchmarks/wire.py` prints both for a whole step's round trip), and the
sim client and its model server share a node in the default shape. The socket lives in Linux's
abstract namespace: it has no file, so nothing is left behind when the server is SIGKILLed, and no
node-local directory has to be agreed on. The ready file names it with the server's host identity
(boot id and network namespace); a client dials it only when its own identity is the same, and
falls back to TCP when the dial fails. A Unix connection is served exactly like a TCP one: the
same hello, the same token where the bind demands one.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path


def host_identity() -> str:
    """What two processes share exactly when an abstract Unix socket of one reaches the other:
    the kernel's boot (its boot id) and the network namespace (its inode)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return ""  # not Linux, or no /proc: never dial a Unix socket
    return f"{boot}:{netns}"


def unix_listener(backlog: int) -> tuple[socket.socket, str]:
    """A listening abstract Unix socket with a fresh name, and that name (without the leading NUL)."""
    name = f"harness-model-{os.getpid()}-{secrets.token_hex(8)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("\0" + name)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock, name


def dial_unix(name: str, timeout_s: float) -> socket.socket:
    """A connection to the abstract socket `name`; OSError if nobody listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect("\0" + name)
    except OSError:
        sock.close()
        raise
    return sock


def reachable(info: dict[str, object]) -> str | None:
    """The Unix socket name a ready file's `info` offers, if this process is on the same host."""
    name, identity = info.get("unix"), info.get("host_id")
    if isinstance(name, str) and name and identity and identity == host_identity():
        return name
    return None
