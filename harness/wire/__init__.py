"""Sim client ⇄ model server wire protocol: length-prefixed frames over a Unix socket on one host
and TCP across hosts, two codecs (msgpack, and JSON, the reference protocol's), typed messages;
and the clients of two other ecosystems' policy servers (openpi, vla-eval).

The sim side uses `harness.wire.client.PolicyClient`; the model side is `harness.model.server`.
docs/decisions/002-plain-transport.md says why it is no more than this.
"""
