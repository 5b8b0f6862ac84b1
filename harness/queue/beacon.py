"""A node-local wake-up for idle workers: a worker that finishes or releases a unit touches a file in
the node's temp dir, and a worker on the same node that waits while every pending unit is leased
re-lists the queue at once, instead of at the end of its idle back-off (up to HEARTBEAT_S).

Why: at a run's end the worker that ran out of units first learnt that the run was done only at
its next listing, up to HEARTBEAT_S after the last unit finished, and the node's slots were held
that long. The file is only a hint, read with a local `stat`, never on the shared filesystem: the
listing still decides, so a missed or spurious wake-up costs at most one back-off or one listing.
Workers on other nodes do not see it and re-list on their back-off, as before. The file is empty;
it stays in the temp dir after the run (one per run dir; a later wait ignores a ring older than
itself).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from pathlib import Path

POLL_S = 0.05  # how often a waiting worker looks at the beacon (a local stat)
SLACK_NS = 20_000_000  # a ring this much older than the wait still counts: the fs clock is coarse


class Beacon:
    """The beacon of one lease queue on this node, named by the queue's absolute path."""

    def __init__(self, root: Path) -> None:
        digest = hashlib.sha256(os.fsencode(os.path.abspath(root))).hexdigest()[:16]
        self.path = Path(tempfile.gettempdir()) / f"harness-queue-{digest}.beacon"
        self._seen = 0  # the ring that ended the last wait: within SLACK_NS it would end the next too

    def ring(self) -> None:
        """Tell this node's waiting workers that the queue changed (best effort)."""
        with contextlib.suppress(OSError):
            self.path.touch()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True as soon as the beacon rings after the wait began (once a ring)."""
        since = max(time.time_ns() - SLACK_NS, self._seen + 1)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                if (rang := self.path.stat().st_mtime_ns) >= since:
                    self._seen = rang
                    return True
            except OSError:
                pass
            time.sleep(min(POLL_S, left))
        return False
