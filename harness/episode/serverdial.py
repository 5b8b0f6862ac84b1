"""Dialling an external policy server (POLICY_SERVER): its connection after the handshake, what it
announces, and the probe that gives the run's contract its section (`harness.config.policyserver`).

The contract's own code opens no connection: the stages that may (run creation, the worker's
contract check) hand it `probe(settings)`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from harness.config.manifest import ManifestError
from harness.config.policymap import PolicyMap
from harness.config.policyserver import CLIENT_NAME, ServerProbe, server_map, server_section
from harness.config.settings import Settings
from harness.wire.errors import WireError
from harness.wire.openpi import OpenpiConnection
from harness.wire.vlaeval import VlaEvalConnection, hello_payload


def open_connection(
    policy_map: PolicyMap, address: str, settings: Settings
) -> OpenpiConnection | VlaEvalConnection:
    """A new connection to the server after its handshake (POLICY_SERVER_RETRIES, _TIMEOUT)."""
    options = {
        "attempts": settings.policy_server_retries,
        "timeout_s": settings.policy_server_timeout,
        "max_size": settings.wire_max_frame,
    }
    if policy_map.protocol == "openpi":
        return OpenpiConnection(address, **options)
    hello = hello_payload(CLIENT_NAME, "1", benchmark=settings.benchmark)
    return VlaEvalConnection(address, hello, **options)


def server_metadata(conn: OpenpiConnection | VlaEvalConnection) -> dict[str, Any]:
    return conn.metadata if isinstance(conn, OpenpiConnection) else conn.server_info


def _section(settings: Settings) -> dict[str, Any]:
    address = settings.policy_server
    policy_map = server_map(address, settings.policy_server_map)
    try:
        conn = open_connection(policy_map, address, settings)
    except (WireError, ValueError) as exc:
        raise ManifestError(f"POLICY_SERVER={address}: cannot read its metadata: {exc}") from None
    try:
        metadata = server_metadata(conn)
    finally:
        conn.close()
    return server_section(policy_map, metadata)


def probe(settings: Settings) -> ServerProbe:
    """What the contract calls to read POLICY_SERVER's section: dials the server once per call."""
    return partial(_section, settings)
