"""Sim client ⇄ model server wire protocol: length-prefixed frames, two codecs, typed messages.

The sim side uses `PolicyClient`; the model side is `harness.server`.
"""

from harness.wire.client import PolicyClient
from harness.wire.errors import RemoteError, WireError
from harness.wire.protocol import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION", "PolicyClient", "RemoteError", "WireError"]
