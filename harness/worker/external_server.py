"""The worker's stand-in for its model server when POLICY_SERVER names an external one.

Nothing is started: the server is someone else's. It offers what the worker asks of
`ModelServerProcess` (ensure → the policy and ckpt that name the result dir, alive, stop), with the
policy name and checkpoint label of the mapping file, so the lease queue, resume and records work
unchanged. Whether the server answers is the sim client's business (it dials it, with bounded
retries, and records what went wrong).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config import knobs
from harness.config.policymap import load_policy_map


class ExternalServer:
    def __init__(self, ready_file: Path, log: Path) -> None:
        self.ready_file = self.client_ready_file = ready_file  # unused by the sim client
        self.log = log
        self.sim_listens = False
        self.starts = 1
        self.address = knobs.get("POLICY_SERVER")
        self.policy_map = load_policy_map(knobs.get("POLICY_SERVER_MAP") or "POLICY_SERVER_MAP is not set")
        self.info: dict[str, Any] = {
            "pid": f"external ({self.policy_map.protocol})", "port": self.address,
            "policy": self.policy_map.policy, "ckpt": self.policy_map.ckpt,
        }  # fmt: skip

    def ensure(self, timeout_s: float, attempts: int = 3) -> dict[str, Any]:
        return self.info

    def alive(self) -> bool:
        return True

    def stop(self) -> None:
        """Nothing to stop: the external server is not ours."""
