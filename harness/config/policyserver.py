"""The external policy server's part of a run's contract (POLICY_SERVER + POLICY_SERVER_MAP).

Which model answers is decided by a server we do not start, so the contract records what that
server says it is: its protocol, the mapping file's content hash, and the hash of the metadata it
announces on connect (openpi's metadata frame, vla-eval's HELLO reply). Creating the run dials the
server once; every worker's contract check dials it again, so a server swapped for another model
mid-run is refused by name, and each sim client compares the hash once more at its hello.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from harness.config import knobs
from harness.config.manifest import ManifestError
from harness.config.policymap import PolicyMap, PolicyMapError, load_policy_map
from harness.wire.errors import WireError
from harness.wire.openpi import OpenpiConnection
from harness.wire.vlaeval import VlaEvalConnection, hello_payload

CLIENT_NAME = "eval-harness"


def metadata_sha256(metadata: dict[str, Any]) -> str:
    """A stable hash of a server's announced metadata."""
    text = json.dumps(metadata, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def open_connection(
    policy_map: PolicyMap, address: str, env: Mapping[str, str] | None = None
) -> OpenpiConnection | VlaEvalConnection:
    """A new connection to the server after its handshake (POLICY_SERVER_RETRIES, _TIMEOUT)."""
    options = {
        "attempts": knobs.get_int("POLICY_SERVER_RETRIES", env, minimum=1),
        "timeout_s": _seconds("POLICY_SERVER_TIMEOUT", env),
        "max_size": knobs.get_int("WIRE_MAX_FRAME", env),
    }
    if policy_map.protocol == "openpi":
        return OpenpiConnection(address, **options)
    hello = hello_payload(CLIENT_NAME, "1", benchmark=knobs.get("BENCHMARK", env))
    return VlaEvalConnection(address, hello, **options)


def _seconds(name: str, env: Mapping[str, str] | None) -> float:
    value = knobs.get(name, env)
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"knob {name}={value!r}: expected a positive number of seconds")
    return seconds


def server_metadata(conn: OpenpiConnection | VlaEvalConnection) -> dict[str, Any]:
    return conn.metadata if isinstance(conn, OpenpiConnection) else conn.server_info


def policy_server_section(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The contract section for POLICY_SERVER in `env` (None when it is not set)."""
    address = knobs.get("POLICY_SERVER", env)
    if not address:
        return None
    path = knobs.get("POLICY_SERVER_MAP", env)
    if not path:
        raise ManifestError(f"POLICY_SERVER={address} needs POLICY_SERVER_MAP (the mapping YAML)")
    try:
        policy_map = load_policy_map(path)
    except PolicyMapError as exc:
        raise ManifestError(str(exc)) from None
    try:
        conn = open_connection(policy_map, address, env)
    except (WireError, ValueError) as exc:
        raise ManifestError(f"POLICY_SERVER={address}: cannot read its metadata: {exc}") from None
    try:
        metadata = server_metadata(conn)
    finally:
        conn.close()
    return {
        "protocol": policy_map.protocol, "policy": policy_map.policy, "map_sha256": policy_map.sha256,
        "metadata_sha256": metadata_sha256(metadata),
    }  # fmt: skip
