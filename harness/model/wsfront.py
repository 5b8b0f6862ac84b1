"""What our WebSocket front ends share (openpi's protocol, vla-eval's): listening, the ready file,
the connection limit and stopping; each front end says how a connection converses.

Same shape as the native `ModelServer`: listens on (bind, port 0), publishes a ready file naming
its protocol, serves one thread a client, at most MODEL_SERVER_MAX_CONNS at once, and stops on
`shutdown()` from another thread. websockets' own shutdown() waits for its serve_forever() to
return, so it must never run in that thread (it would deadlock): accepting runs in a thread of its
own and `serve_forever` here waits for the stop flag.
"""

from __future__ import annotations

import logging
import os
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from websockets.sync.server import Request, Response, ServerConnection, serve

from harness.config.settings import Settings
from harness.model.policyload import LoadedPolicy
from harness.wire.errors import WireError
from harness.wire.readyfile import advertised_host, remove_ready, run_token, write_ready

log = logging.getLogger("model_server")


class WebSocketFrontEnd(ABC):
    """A front end: subclasses set `protocol` and `clients` (for the log) and define `converse`,
    `busy` (refuse a connection over the limit) and `admit` (the HTTP request before the upgrade:
    health checks and the token; None lets it through)."""

    protocol = ""
    clients = ""

    def __init__(
        self, policy: LoadedPolicy, ready_file: str | Path, settings: Settings, bind: str | None = None
    ) -> None:
        """`bind` overrides MODEL_SERVER_BIND (tests, benchmarks)."""
        self.policy = policy
        self.ready_file = Path(ready_file)
        self.bind = settings.model_server_bind if bind is None else bind
        self.token = run_token(self.bind)
        self._stop = threading.Event()
        self._slots = threading.BoundedSemaphore(settings.model_server_max_conns)
        try:
            self._server = serve(
                self._handle, self.bind, 0, compression=None, max_size=settings.wire_max_frame,
                process_request=self.admit, ping_interval=None,
                open_timeout=settings.model_server_hello_timeout,
            )  # fmt: skip
        except OSError as exc:
            raise WireError(f"MODEL_SERVER_BIND={self.bind}: cannot listen there: {exc}") from None
        self.port: int = self._server.socket.getsockname()[1]

    @abstractmethod
    def admit(self, conn: ServerConnection, request: Request) -> Response | None:
        """The HTTP request before the upgrade: a response (health, refusal), or None to upgrade."""

    @abstractmethod
    def busy(self, conn: ServerConnection) -> None:
        """Refuse a connection over MODEL_SERVER_MAX_CONNS, in the protocol's words."""

    @abstractmethod
    def converse(self, conn: ServerConnection) -> None:
        """Serve one connection until the peer leaves."""

    def _handle(self, conn: ServerConnection) -> None:
        if not self._slots.acquire(blocking=False):
            self.busy(conn)
            return
        try:
            self.converse(conn)
        finally:
            self._slots.release()

    def serve_forever(self) -> None:
        """Accept until shutdown(); the ready file goes away on the way out."""
        info: dict[str, Any] = {
            "host": advertised_host(self.bind), "port": self.port, "pid": os.getpid(),
            "policy": self.policy.name, "ckpt": self.policy.ckpt, "protocol": self.protocol,
        }  # fmt: skip
        if self.token:
            info["token"] = self.token
        write_ready(self.ready_file, info)
        log.info("serving %s to %s on %s port %d", self.policy.name, self.clients, self.bind, self.port)
        accepting = threading.Thread(target=self._server.serve_forever, daemon=True)
        accepting.start()
        try:
            while not self._stop.wait(0.5):
                pass
        finally:
            self._server.shutdown()
            accepting.join(10)
            remove_ready(self.ready_file, os.getpid())

    def shutdown(self) -> None:
        """Stop serving, from any other thread (a stop signal's watcher: harness.process.stopsignals;
        never a signal handler, which could land inside this Event's lock): serve_forever closes the
        connections and returns."""
        self._stop.set()
