"""Exceptions of the wire protocol, shared by both ends."""

from __future__ import annotations


class WireError(Exception):
    """A frame or message that cannot be sent, received or understood."""


class RemoteError(WireError):
    """The other end answered with an `error` message; the text is its message."""


class PeerClosed(WireError):
    """The other end closed the connection (cleanly, between frames, or mid-frame)."""
