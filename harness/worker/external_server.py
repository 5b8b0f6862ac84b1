"""The worker's stand-in for its model server when POLICY_SERVER names an external one.

Nothing is started: the server is someone else's. It offers what the worker asks of
`ModelServerProcess` (ensure → the policy and ckpt that name the result dir, alive, stop), with the
policy name and checkpoint label of the mapping file, so the lease queue, resume and records work
unchanged. The sim client dials the server itself (with bounded retries) and records what went wrong.

`alive` is a real health check: a thread asks the server's health endpoint (openpi's `GET /healthz`,
vla-eval's `GET /health`; both protocols are WebSocket servers that answer plain HTTP there) every
PING_EVERY_S, each with PING_TIMEOUT_S to answer. Any HTTP answer counts as alive; MISSES_TO_DEAD
checks in a row without one (refused, reset, or silent: a hung or SIGSTOPped server still completes
TCP connects from its listen backlog) make it dead, so the worker kills the sim client waiting on it
at once and charges the attempt to the model server, not to the unit (harness/worker/faults.py).
"""

from __future__ import annotations

import http.client
import ssl
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.config.policymap import load_policy_map
from harness.config.settings import Settings

PING_EVERY_S = 2.0  # between health checks (rate limit: the check costs the server one HTTP request)
PING_TIMEOUT_S = 5.0  # for one answer: an openpi server answers between inferences, not during one
MISSES_TO_DEAD = 2  # checks in a row without an answer before the server counts as down
HEALTH_PATHS = {"openpi": "/healthz", "vla-eval": "/health"}


def health_target(address: str, protocol: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of the health endpoint of the server at `address` (`host:port`,
    or a ws:// / wss:// URL)."""
    parts = urlsplit(address if "://" in address else f"ws://{address}")
    secure = parts.scheme in ("wss", "https")
    try:
        port = parts.port or (443 if secure else 80)
    except ValueError:
        raise ValueError(f"POLICY_SERVER={address!r}: not host:port or a ws:// URL") from None
    if not parts.hostname:
        raise ValueError(f"POLICY_SERVER={address!r}: names no host")
    return ("https" if secure else "http"), parts.hostname, port, HEALTH_PATHS.get(protocol, "/")


def ask_health(scheme: str, host: str, port: int, path: str, timeout_s: float) -> str | None:
    """None when the server answered the health request (with any status); else why not."""
    if scheme == "https":  # a liveness check, not trust: a self-signed certificate answers too
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout_s, context=context
        )
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        conn.getresponse().read()
        return None
    except TimeoutError:
        return f"no answer to GET {path} within {timeout_s:g} s"
    except (OSError, http.client.HTTPException) as exc:
        return f"GET {path}: {type(exc).__name__}: {exc}"
    finally:
        conn.close()


class ExternalServer:
    def __init__(self, ready_file: Path, log: Path, settings: Settings) -> None:
        self.ready_file = self.client_ready_file = ready_file  # unused by the sim client
        self.log = log
        self.sim_listens = False
        self.starts = 1
        self.address = settings.policy_server
        self.policy_map = load_policy_map(settings.policy_server_map or "POLICY_SERVER_MAP is not set")
        self.info: dict[str, Any] = {
            "pid": f"external ({self.policy_map.protocol})", "port": self.address,
            "policy": self.policy_map.policy, "ckpt": self.policy_map.ckpt,
        }  # fmt: skip
        self.health = health_target(self.address, self.policy_map.protocol)
        self.trouble: str | None = None  # why the server counts as down, while it does
        self._misses = 0
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._pinger: threading.Thread | None = None

    def ensure(self, timeout_s: float, attempts: int = 3) -> dict[str, Any]:
        self._watch()
        return self.info

    def kill_if_stopped(self) -> bool:
        """Never: an external server is not this worker's process (its health check judges it)."""
        return False

    def alive(self) -> bool:
        """False once the server missed MISSES_TO_DEAD health checks in a row (see the module doc)."""
        self._watch()
        return self.trouble is None

    def stop(self) -> None:
        """Stop the health checks; nothing else to stop: the external server is not ours."""
        self._closed.set()

    def _watch(self) -> None:
        with self._lock:
            if self._pinger is None:
                self._pinger = threading.Thread(target=self._ping_loop, name="server-health", daemon=True)
                self._pinger.start()

    def _ping_loop(self) -> None:
        scheme, host, port, path = self.health
        while not self._closed.is_set():
            why = ask_health(scheme, host, port, path, PING_TIMEOUT_S)
            self._misses = 0 if why is None else self._misses + 1
            if why is None:
                self.trouble = None
            elif self._misses >= MISSES_TO_DEAD:
                self.trouble = f"POLICY_SERVER {self.address} missed {self._misses} health checks: {why}"
            self._closed.wait(PING_EVERY_S)
