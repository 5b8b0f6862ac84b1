"""`PolicyClient`: the sim side of the wire. One connection, one episode at a time.

Normal mode dials the model server found in its ready file; the constructor takes any connected
stream socket (the in-process debug mode hands it one end of a socketpair). Sim-as-server mode
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
from harness.wire.frames import DEFAULT_MAX_FRAME, recv_frame, send_frame, set_no_delay
from harness.wire.local import UNIX_MODES, dial_unix, reachable
from harness.wire.readyfile import (
    advertised_host,
    listen_socket,
    remove_ready,
    run_token,
    wait_ready,
    write_ready,
)
from harness.wire.shm import SHM_CODEC, SHM_MODES, Offer, same_host
from harness.wire.shmcodec import ShmCodec
from harness.wire.spin import DEFAULT_SPIN_US, Spin

DEFAULT_IO_TIMEOUT_S = 600.0


class PolicyClient:
    """Requests actions from a model server. Methods raise WireError / RemoteError (server's text)."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        token: str | None = None,
        io_timeout_s: float = DEFAULT_IO_TIMEOUT_S,
        ready_file: Path | None = None,
        expect_token: str | None = None,
        codec: str = "msgpack",
        max_frame: int = DEFAULT_MAX_FRAME,
        shm: str = "auto",
        spin_us: int = DEFAULT_SPIN_US,
    ) -> None:
        if shm not in SHM_MODES:
            sock.close()
            raise WireError(f"WIRE_SHM={shm!r}: expected one of {', '.join(SHM_MODES)}")
        self._sock = sock
        self._sock.settimeout(io_timeout_s)
        set_no_delay(self._sock)
        self._token = token
        self._expect_token = expect_token
        self._ready_file = ready_file
        self._codec: Codec = JsonCodec()
        self._preferred_codec = codec
        self._max_frame = max_frame
        self._shm = shm
        self._spin = Spin(spin_us)  # polls for a reply that comes within spin_us (WIRE_SPIN_US)
        self.server_spec: dict[str, Any] = {}

    @classmethod
    def from_ready_file(
        cls,
        path: str | Path,
        timeout_s: float = 300.0,
        io_timeout_s: float = DEFAULT_IO_TIMEOUT_S,
        host: str | None = None,
        unix: str = "auto",
        **options: Any,
    ) -> PolicyClient:
        """Wait for the server's ready file, then connect (retrying while a stale file points nowhere).

        `host` (MODEL_SERVER_HOST), when given, overrides the host in the file (cross-node setups);
        otherwise a server on this host is dialled on its Unix socket unless `unix` (WIRE_UNIX) is
        "0", over TCP when that fails. `options` (codec, max_frame, shm, spin_us) go to the constructor.
        """
        if unix not in UNIX_MODES:
            raise WireError(f"WIRE_UNIX={unix!r}: expected one of {', '.join(UNIX_MODES)}")
        deadline = time.monotonic() + timeout_s
        while True:
            info = wait_ready(path, max(0.0, deadline - time.monotonic()))
            name = reachable(info) if host is None and unix == "auto" else None
            if name is not None:
                try:
                    sock = dial_unix(name, timeout_s=min(10.0, timeout_s))
                except OSError:
                    pass  # a stale file, or a socket this process cannot reach: TCP says which
                else:
                    return cls(sock, token=info.get("token"), io_timeout_s=io_timeout_s, **options)
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
            return cls(sock, token=info.get("token"), io_timeout_s=io_timeout_s, **options)

    @classmethod
    def listen(
        cls,
        ready_file: str | Path,
        timeout_s: float = 300.0,
        bind: str = "127.0.0.1",
        io_timeout_s: float = DEFAULT_IO_TIMEOUT_S,
        **options: Any,
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
            sock, io_timeout_s=io_timeout_s, ready_file=Path(ready_file), expect_token=token, **options
        )

    def _call(self, msg: dict[str, Any], codec: Codec | None = None) -> dict[str, Any]:
        codec = codec or self._codec
        send_frame(self._sock, codec.encode(msg), self._max_frame)
        body = recv_frame(self._sock, self._max_frame, spin=self._spin)
        return protocol.check_reply(codec.decode(body), msg["type"])

    def hello(self, client_spec: dict[str, Any]) -> dict[str, Any]:
        """Agree on protocol version and codec, exchange specs; returns the server's spec.

        A spec mismatch (e.g. action_dim) raises with both values named, from whichever side sees it.
        Shared memory is offered when `shm` is "1", or "auto" and the server is on this host; with
        "1" a server that does not take it is an error naming its reason.
        """
        offer = Offer() if self._shm == "1" or (self._shm == "auto" and same_host(self._sock)) else None
        try:
            spec, codec = self._hello(client_spec, offer)
        except BaseException:
            if offer is not None:
                offer.close()
            raise
        if offer is not None and not isinstance(codec, ShmCodec):
            offer.close()
        self._set_codec(codec)
        self.server_spec = spec
        return spec

    def _hello(self, client_spec: dict[str, Any], offer: Offer | None) -> tuple[dict[str, Any], Codec]:
        preferred = self._preferred_codec
        codecs = [SHM_CODEC] if offer else []
        codecs += [preferred] + [name for name in CODECS if name != preferred]
        field = offer.field if offer else None
        reply = self._call(protocol.hello(client_spec, codecs, self._token, field), JsonCodec())
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
        picked = str(reply.get("codec"))
        if offer is not None and picked == SHM_CODEC:
            return spec, ShmCodec(offer.request, offer.reply, self._max_frame, lend=True)
        if self._shm == "1":
            why = reply.get("shm_refused") or "it did not say why"
            raise WireError(f"WIRE_SHM=1 but the model server did not take shared memory: {why}")
        return spec, get_codec(picked)

    def _set_codec(self, codec: Codec) -> None:
        if isinstance(self._codec, ShmCodec):
            self._codec.close()
        self._codec = codec

    def reset(self, task: str, task_config: str, instruction: str, seed: int) -> None:
        """Start a new episode on this connection (other connections are untouched)."""
        self._call(protocol.reset(task, task_config, instruction, int(seed)))

    def infer(self, obs: dict[str, Any], step: int) -> np.ndarray:
        """The action chunk for `obs` at env step `step`: float32 [num_actions, action_dim]."""
        reply = self._call(protocol.infer(obs, int(step)))
        return protocol.as_chunk(reply.get("actions"), self.server_spec)

    def ping(self) -> None:
        self._call({"type": "ping"})

    def close(self) -> None:
        try:
            self._sock.close()
            self._set_codec(JsonCodec())
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
