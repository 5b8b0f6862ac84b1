"""Sim client ⇄ model server wire protocol: length-prefixed frames, two codecs, typed messages.

The sim side uses `harness.wire.client.PolicyClient`; the model side is `harness.model.server`.
Nothing is imported here, so that `harness.config.knobs` can read the frame limit's default
(`harness.wire.frames`) in a bare Python without numpy.
"""
