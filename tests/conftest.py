"""Suite-wide pytest plugins and fixtures: `support.slurm_support` provides the session's local Slurm
cluster fixture; `pair` is a connected pair of loopback TCP sockets (wire and server tests)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

pytest_plugins = ["support.slurm_support"]


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    listener = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(listener.getsockname())
    b, _ = listener.accept()
    listener.close()
    a.settimeout(10)
    b.settimeout(10)
    yield a, b
    a.close()
    b.close()
