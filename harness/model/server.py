"""The persistent model server: loads a policy once and serves many sim clients at once.

One thread per connection, each with its own `Session` (episode state, the wrapper's per-session
state), so a reset on one connection never touches another; the sessions' requests are batched into
one model call (`harness.model.batcher`), each seeded from (task, task_config, episode seed, step),
so answers do not depend on how requests from different clients interleave or are grouped. Batch
statistics: a `{"type": "ping", "stats": true}` request, and a `batch stats:` log line.
A bad request gets an `error` reply and the connection lives on; a broken stream (oversize frame,
mid-frame disconnect or stall, wrong token) drops that one connection, and so does anything but a
hello with the token before one on a token-protected server. The server itself only stops on
SIGTERM/SIGINT or `shutdown()`.

Hostile peers are bounded here: at most MODEL_SERVER_MAX_CONNS connections (more are closed at
once); until its hello succeeds a connection may send frames of HELLO_MAX_FRAME at most and is
closed after MODEL_SERVER_HELLO_TIMEOUT seconds; after it, frames as big as the observation its
hello declares; a frame body costs memory only as it arrives (`harness.wire.frames`), and only
inside the connections' shared budget of bytes in flight (`harness.model.requests`,
`harness.model.inflight`: over it, a `server busy` error reply); a body decodes into no more than
its item count allows (`harness.wire.bounds`); running out of descriptors in
accept() is waited out, not fatal. Client faults (bad requests, drops) are logged in throttled
single lines; only a policy's exception keeps its traceback (also throttled).
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import threading
import time
from pathlib import Path
from typing import Any

from harness.config.settings import Settings
from harness.model.inflight import Busy, InflightBudget, Reservation
from harness.model.policyload import LoadedPolicy, PolicyCallFailed
from harness.model.requests import next_request
from harness.model.session import Drop, Session
from harness.wire import protocol
from harness.wire.codecs import Codec, JsonCodec
from harness.wire.errors import PeerClosed, WireError
from harness.wire.frames import send_frame, tune
from harness.wire.local import host_identity, unix_listener
from harness.wire.readyfile import (
    advertised_host,
    listen_socket,
    remove_ready,
    run_token,
    write_ready,
)

log = logging.getLogger("model_server")

IDLE_TIMEOUT_S = 3600.0  # a greeted sim client may spend a long time between requests (slow sim steps)
ACCEPT_BACKOFF_S = 0.1  # pause between accept() tries while out of descriptors or buffers
ERROR_REPLY_LIMIT = 1 << 20  # an error reply is a line of text
LOG_EVERY_S = 10.0  # at most one line per this many seconds for client faults, one for policy failures


class _Throttled:
    """At most one log line per LOG_EVERY_S, saying how many it held back since the last one."""

    def __init__(self, level: int) -> None:
        self.level = level
        self._lock = threading.Lock()
        self._next = 0.0
        self._held = 0

    def __call__(self, msg: str, *args: Any, exc_info: BaseException | None = None) -> None:
        with self._lock:
            now = time.monotonic()
            if now < self._next:
                self._held += 1
                return
            held, self._held, self._next = self._held, 0, now + LOG_EVERY_S
        more = f" (and {held} more like it since the last such line)" if held else ""
        log.log(self.level, msg + more, *args, exc_info=exc_info)


class FaultLog:
    """One server's throttled lines: client faults (warnings), policy failures (errors, traceback)."""

    def __init__(self) -> None:
        self.client = _Throttled(logging.WARNING)
        self.policy = _Throttled(logging.ERROR)


def serve_connection(
    conn: socket.socket,
    policy: LoadedPolicy,
    settings: Settings,
    token: str | None = None,
    reply_token: str | None = None,
    hello_timeout_s: float | None = None,
    faults: FaultLog | None = None,
    budget: InflightBudget | None = None,
) -> None:
    """Answer requests on one connection until the peer leaves or the stream breaks.

    With `hello_timeout_s`, a connection without a successful hello by then is closed (accepted
    connections; one the model side dialled out waits for the sim's first episode to be built).
    `faults` is where its faults are logged (the server's, shared by its connections); `budget`
    is the bytes in flight it shares with them (default: its own, of MODEL_SERVER_INFLIGHT_BYTES).
    """
    faults = faults or FaultLog()
    budget = budget or InflightBudget(settings.model_server_inflight_bytes)
    conn.settimeout(IDLE_TIMEOUT_S)
    tune(conn)
    limit = settings.wire_max_frame
    session = Session(policy, token, reply_token)
    hello_by = None if hello_timeout_s is None else time.monotonic() + hello_timeout_s
    peer = _peer(conn)
    reservation: Reservation | None = None
    try:
        while True:
            try:
                body, reservation = next_request(conn, session, limit, budget, hello_by)
            except PeerClosed:
                return
            except Busy as exc:  # its body was read away: the stream is intact, the request refused
                if session.locked:
                    _drop(conn, session.codec, peer, str(exc), faults)
                    return
                faults.client("refused a request from %s: %s", peer, exc)
                send_frame(conn, session.codec.encode(protocol.error(str(exc))), limit)
                continue
            except WireError as exc:  # oversize or stalled frame, or no hello: the stream is done
                reason = str(exc)
                if hello_by is not None and not session.greeted and time.monotonic() >= hello_by:
                    reason = f"no hello within {hello_timeout_s:g} s: closing the connection"
                _drop(conn, session.codec, peer, reason, faults)
                return
            codec, locked = session.codec, session.locked
            try:
                msg = codec.decode(body)
                body = None  # the decoded message holds what it needs: the body goes now
                reply = session.handle(msg)
            except Drop as exc:
                _drop(conn, codec, peer, str(exc), faults)
                return
            except PolicyCallFailed as exc:
                faults.policy("policy failed on a request from %s: %s", peer, exc, exc_info=exc.__cause__)
                reply = protocol.error(str(exc))
            except Exception as exc:  # the client's fault: a WireError, or a check tripping on odd values
                reason = str(exc) if isinstance(exc, WireError) else f"{type(exc).__name__}: {exc}"
                if locked:  # nothing but a good hello is answered before the token
                    _drop(conn, codec, peer, reason, faults)
                    return
                faults.client("bad request from %s: %s", peer, reason)
                reply = protocol.error(reason)
            body = msg = None  # the request's memory is dropped before its bytes go back to the budget
            send_frame(conn, codec.encode(reply), limit)
            reply = None
            reservation.release()
            session.switch_codec()
    except (WireError, OSError) as exc:
        log.info("connection dropped: %s", exc)
    finally:
        if reservation is not None:
            reservation.release()
        session.close()
        conn.close()


def _peer(conn: socket.socket) -> str:
    if conn.family not in (socket.AF_INET, socket.AF_INET6):
        return "a local peer"  # a Unix socket (the in-process debug mode's socketpair) has no address
    try:
        host, port = conn.getpeername()[:2]
    except OSError:
        return "a client"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _drop(conn: socket.socket, codec: Codec, peer: str, reason: str, faults: FaultLog) -> None:
    faults.client("dropping %s: %s", peer, reason)
    _try_send(conn, codec, protocol.error(reason))


def _try_send(conn: socket.socket, codec: Codec, msg: dict[str, Any]) -> None:
    with contextlib.suppress(WireError, OSError):
        send_frame(conn, codec.encode(msg), ERROR_REPLY_LIMIT)


class ModelServer:
    """Listens on (bind, port 0) and on an abstract Unix socket for clients on this host
    (`harness.wire.local`); publishes a ready file; one thread per client, up to a limit."""

    def __init__(
        self, policy: LoadedPolicy, ready_file: str | Path, settings: Settings, bind: str | None = None
    ) -> None:
        """`bind` overrides MODEL_SERVER_BIND (tests, benchmarks)."""
        self.policy = policy
        self.settings = settings
        self.ready_file = Path(ready_file)
        self.bind = settings.model_server_bind if bind is None else bind
        self.token = run_token(self.bind)
        self.max_conns = settings.model_server_max_conns
        self._slots = threading.BoundedSemaphore(self.max_conns)
        self._faults = FaultLog()
        self._budget = InflightBudget(settings.model_server_inflight_bytes)  # one for all its connections
        self._stop = threading.Event()
        try:
            tcp = listen_socket(self.bind, backlog=64)
        except OSError as exc:
            raise WireError(f"MODEL_SERVER_BIND={self.bind}: cannot listen there: {exc}") from None
        self.port: int = tcp.getsockname()[1]
        self._listeners = [tcp]
        self.unix: str | None = None
        try:
            unix, self.unix = unix_listener(backlog=64)
        except OSError as exc:  # TCP still serves every client
            log.warning("no Unix socket for same-host clients (%s): they use TCP", exc)
        else:
            self._listeners.append(unix)
        for listener in self._listeners:
            listener.setblocking(False)

    def publish(self) -> None:
        info: dict[str, Any] = {
            "host": advertised_host(self.bind),
            "port": self.port,
            "pid": os.getpid(),
            "policy": self.policy.name,
            "ckpt": self.policy.ckpt,
        }
        if self.token:
            info["token"] = self.token
        if self.unix:
            info["unix"], info["host_id"] = self.unix, host_identity()
        write_ready(self.ready_file, info)

    def serve_forever(self) -> None:
        """Accept until shutdown(); the ready file goes away on the way out."""
        self.publish()
        log.info("serving %s on %s port %d", self.policy.name, self.bind, self.port)
        starved = False  # accept() is failing (descriptors, buffers): said once, until it works again
        ready = selectors.DefaultSelector()
        for listener in self._listeners:
            ready.register(listener, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, _ in ready.select(timeout=0.2):
                    try:
                        conn, peer = key.fileobj.accept()  # type: ignore[union-attr]
                    except BlockingIOError:  # another event took it, or the peer left
                        continue
                    except OSError as exc:
                        if not starved:
                            log.warning("cannot accept connections (%s): retrying until it passes", exc)
                        starved = True
                        self._stop.wait(ACCEPT_BACKOFF_S)
                        continue
                    if starved:
                        log.info("accepting connections again")
                        starved = False
                    conn.setblocking(True)
                    self._admit(conn, peer)
        finally:
            ready.close()
            for listener in self._listeners:
                listener.close()
            remove_ready(self.ready_file, os.getpid())
            log.info("batch stats: %s", self.policy.batcher.stats().line())

    def _admit(self, conn: socket.socket, peer: Any) -> None:
        """Serve `conn` in its own thread if a slot is free; else tell it so and close it."""
        if not self._slots.acquire(blocking=False):
            conn.settimeout(1.0)
            busy = f"server busy: {self.max_conns} connections open (MODEL_SERVER_MAX_CONNS)"
            _drop(conn, JsonCodec(), _peer(conn), busy, self._faults)
            conn.close()
            return
        log.info("client %s connected", peer or "on the Unix socket")
        threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            serve_connection(
                conn,
                self.policy,
                self.settings,
                self.token,
                hello_timeout_s=self.settings.model_server_hello_timeout,
                faults=self._faults,
                budget=self._budget,
            )
        finally:
            self._slots.release()

    def shutdown(self) -> None:
        """Stop accepting, from another thread (a stop signal's watcher: harness.process.stopsignals;
        never a signal handler, which could land inside this Event's lock)."""
        self._stop.set()
