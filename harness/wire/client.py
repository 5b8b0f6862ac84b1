"""`PolicyClient`: the sim side of the wire. One connection, one episode at a time.

Normal mode dials the model server found in its ready file: over its Unix socket when the server
is on this host (`harness.wire.local`), else over TCP; the constructor takes any connected stream
socket (the in-process debug mode hands it one end of a socketpair). Sim-as-server mode
(`PolicyClient.listen`) binds, writes its own ready file and waits for the model side to connect;
the requests still flow sim → model, so everything after the connect is identical.
"""

from __future__ import annotations

import hmac
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from harness.wire import protocol
from harness.wire.codecs import CODECS, Codec, JsonCodec, get_codec
from harness.wire.errors import WireError
from harness.wire.frames import DEFAULT_MAX_FRAME, recv_frame, send_frame, tune
from harness.wire.local import dial_unix, reachable
from harness.wire.readyfile import (
    advertised_host,
    listen_socket,
    remove_ready,
    run_token,
    wait_ready,
    write_ready,
)

DEFAULT_IO_TIMEOUT_S = 600.0


class PolicyClient:
    """Requests actions from a model server. Methods raise WireError / RemoteError (server's text)."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        token: str | None = None,
        io_timeout_s: float = DEFAULT_IO_TIMEOUT_S,
        ready_file: Path | None = None,
        expect_token: str | None = None,
        codec: str = "msgpack",
    ) -> None:
        """`max_frame` is WIRE_MAX_FRAME, `codec` the one to ask for first (WIRE_CODEC)."""
        self._sock = sock
        self._sock.settimeout(io_timeout_s)
        tune(self._sock)
        self._token = token
        self._expect_token = expect_token
        self._ready_file = ready_file
        self._codec: Codec = JsonCodec()
        self._preferred_codec = codec
        self._max_frame = max_frame
        self.server_spec: dict[str, Any] = {}

    @classmethod
    def from_ready_file(
        cls,
        path: str | Path,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        timeout_s: float = 300.0,
        io_timeout_s: float = DEFAULT_IO_TIMEOUT_S,
        host: str | None = None,
        unix: bool = True,
        codec: str = "msgpack",
    ) -> PolicyClient:
        """Wait for the server's ready file, then connect (retrying while a stale file points nowhere).

        `host` (MODEL_SERVER_HOST), when given, overrides the host in the file (cross-node setups);
        otherwise a server on this host is dialled on its Unix socket (unless `unix` is False: the
        benchmarks' TCP figures), over TCP when that fails.
        """
        options = {"max_frame": max_frame, "io_timeout_s": io_timeout_s, "codec": codec}
        deadline = time.monotonic() + timeout_s
        while True:
            info = wait_ready(path, max(0.0, deadline - time.monotonic()))
            name = reachable(info) if host is None and unix else None
            if name is not None:
                try:
                    sock = dial_unix(name, timeout_s=min(10.0, timeout_s))
                except OSError:
                    pass  # a stale file, or a socket this process cannot reach: TCP says which
                else:
                    return cls(sock, token=info.get("token"), **options)
            address = host or info["host"]
            try:
                sock = socket.create_connection((address, info["port"]), timeout=min(10.0, timeout_s))
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise WireError(
                        f"cannot connect to {address}:{info['port']} from {path}: {exc}"
                    ) from None
                time.sleep(0.2)
                continue
            return cls(sock, token=info.get("token"), **options)

    @classmethod
    def listen(
        cls,
        ready_file: str | Path,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        timeout_s: float = 300.0,
        bind: str = "127.0.0.1",
        io_timeout_s: float = DEFAULT_IO_TIMEOUT_S,
        codec: str = "msgpack",
    ) -> PolicyClient:
        """Sim-as-server: bind (MODEL_SERVER_BIND) on port 0, publish a ready file, accept the model side.

        A non-loopback bind gets a token in the ready file; the model side must echo it in its hello
        reply or the connection is refused.
        """
        token = run_token(bind)
        listener = listen_socket(bind)
        try:
            listener.settimeout(timeout_s)
            info: dict[str, Any] = {
                "host": advertised_host(bind),
                "port": listener.getsockname()[1],
                "pid": os.getpid(),
                "role": "sim",
            }
            if token:
                info["token"] = token
            write_ready(ready_file, info)
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                remove_ready(ready_file, os.getpid())
                raise WireError(f"no model side connected to {ready_file} within {timeout_s:g} s") from None
        finally:
            listener.close()
        return cls(
            sock,
            max_frame=max_frame,
            io_timeout_s=io_timeout_s,
            ready_file=Path(ready_file),
            expect_token=token,
            codec=codec,
        )

    def _call(self, msg: dict[str, Any]) -> dict[str, Any]:
        send_frame(self._sock, self._codec.encode(msg), self._max_frame)
        body = recv_frame(self._sock, self._max_frame)
        return protocol.check_reply(self._codec.decode(body), msg["type"])

    def hello(self, client_spec: dict[str, Any]) -> dict[str, Any]:
        """Agree on protocol version and codec, exchange specs; returns the server's spec.

        A spec mismatch (e.g. action_dim) raises with both values named, from whichever side sees it.
        """
        preferred = self._preferred_codec
        codecs = [preferred] + [name for name in CODECS if name != preferred]
        self._codec = JsonCodec()
        reply = self._call(protocol.hello(client_spec, codecs, self._token))
        if reply.get("version") != protocol.PROTOCOL_VERSION:
            raise WireError(
                f"protocol version mismatch: server speaks {reply.get('version')}, "
                f"client speaks {protocol.PROTOCOL_VERSION}"
            )
        if self._expect_token and not hmac.compare_digest(str(reply.get("token", "")), self._expect_token):
            self.close()
            raise WireError("the connecting model side did not present this run's token")
        spec = reply.get("spec")
        if not isinstance(spec, dict):
            raise WireError(f"hello reply carries no server spec: {reply!r:.200}")
        protocol.check_specs(spec, client_spec)
        self._codec = get_codec(str(reply.get("codec")))
        self.server_spec = spec
        return spec

    def reset(self, task: str, task_config: str, instruction: str, seed: int) -> None:
        """Start a new episode on this connection (other connections are untouched)."""
        self._call(protocol.reset(task, task_config, instruction, int(seed)))

    def infer(self, obs: dict[str, Any], step: int) -> np.ndarray:
        """The action chunk for `obs` at env step `step`: float32 [chunk_len, action_dim]."""
        reply = self._call(protocol.infer(obs, int(step)))
        return protocol.as_chunk(reply.get("actions"), self.server_spec)

    def ping(self) -> None:
        self._call({"type": "ping"})

    def close(self) -> None:
        try:
            self._sock.close()
        finally:
            if self._ready_file is not None:
                remove_ready(self._ready_file, os.getpid())
                self._ready_file = None

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
