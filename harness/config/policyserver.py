"""The external policy server's part of a run's contract (POLICY_SERVER + POLICY_SERVER_MAP).

Which model answers is decided by a server we do not start, so the contract records what that
server says it is: its protocol, the mapping file's content hash, and the hash of the metadata it
announces on connect (openpi's metadata frame, vla-eval's HELLO reply). Creating the run dials the
server once; every worker's contract check dials it again, so a server swapped for another model
mid-run is refused by name, and each sim client compares the hash once more at its hello.

Here only what needs no connection: the mapping the knobs name, and the section made of what the
server announced. The dialling is the sim side's (`harness.episode.serverdial`), handed to the
contract as a probe by the stage that may open a connection (the launchers, the worker).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from harness.config.manifest import ManifestError
from harness.config.policymap import PolicyMap, PolicyMapError, load_policy_map

CLIENT_NAME = "eval-harness"
# dials POLICY_SERVER and returns its contract section (`harness.episode.serverdial.probe`)
ServerProbe = Callable[[], dict[str, Any]]


def metadata_sha256(metadata: dict[str, Any]) -> str:
    """A stable hash of a server's announced metadata."""
    text = json.dumps(metadata, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def server_map(address: str, map_path: str) -> PolicyMap:
    """POLICY_SERVER_MAP's mapping for the server at `address` (ManifestError naming what is wrong)."""
    if not map_path:
        raise ManifestError(f"POLICY_SERVER={address} needs POLICY_SERVER_MAP (the mapping YAML)")
    try:
        return load_policy_map(map_path)
    except PolicyMapError as exc:
        raise ManifestError(str(exc)) from None


def server_section(policy_map: PolicyMap, metadata: dict[str, Any]) -> dict[str, Any]:
    """The contract section of a server that announced `metadata`, paired by `policy_map`."""
    return {
        "protocol": policy_map.protocol, "policy": policy_map.policy, "map_sha256": policy_map.sha256,
        "metadata_sha256": metadata_sha256(metadata),
    }  # fmt: skip


def policy_server_section(address: str, probe: ServerProbe | None) -> dict[str, Any] | None:
    """The contract section for POLICY_SERVER=`address` (None when it is not set), from `probe`;
    a check that may not dial (no probe) refuses by name rather than leave the section out."""
    if not address:
        return None
    if probe is None:
        raise ManifestError(f"POLICY_SERVER={address}: this check does not dial policy servers")
    return probe()
