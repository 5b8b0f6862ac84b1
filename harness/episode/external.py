"""`ExternalPolicyClient`: the sim client's stand-in for PolicyClient when POLICY_SERVER names another
ecosystem's policy server (openpi's or vla-eval's protocol), with the mapping of POLICY_SERVER_MAP.

Same four calls as PolicyClient (hello, reset, infer, close), so the episode loop, records, resume
and stats do not change. `hello` checks the pairing before the first episode: the mapping against
the robot (action_dim, cameras, image size) and against what the server announced (the map's
`expect` entries; for vla-eval its declared action and observation specs), and the server's
metadata against the run's contract; any mismatch raises one WireError naming the server. Each
episode gets a fresh connection (openpi has no episode message: a new connection is its reset; for
vla-eval also EPISODE_START/END), dialled with POLICY_SERVER_RETRIES attempts. Mid-episode a lost
connection, a timeout, an error reply, or an action of the wrong shape or dtype raises WireError,
which the sim client records as an errored episode; only a server that cannot be reached again at
the next episode raises PeerClosed, which ends the unit.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import numpy as np

from harness.config.policymap import PolicyMap, get_path, put_path
from harness.config.policyserver import metadata_sha256
from harness.config.settings import Settings
from harness.episode.serverdial import open_connection, server_metadata
from harness.wire.errors import PeerClosed, WireError
from harness.wire.openpi import OpenpiConnection
from harness.wire.vlaeval import VlaEvalConnection


class ExternalPolicyClient:
    """Requests actions from an external policy server; see the module docstring."""

    def __init__(
        self,
        address: str,
        policy_map: PolicyMap,
        settings: Settings,
        expect_metadata_sha256: str | None = None,
    ) -> None:
        self.address, self.map, self.settings = address, policy_map, settings
        self.expect_metadata_sha256 = expect_metadata_sha256
        self._conn: OpenpiConnection | VlaEvalConnection | None = open_connection(
            policy_map, address, settings
        )
        self.metadata = server_metadata(self._conn)
        self.server_spec: dict[str, Any] = {}
        self._in_episode = False
        self._used = False  # an episode ran on the current connection

    @property
    def name(self) -> str:
        return f"{self.map.protocol} policy server {self.address}"

    def hello(self, client_spec: dict[str, Any]) -> dict[str, Any]:
        problems = self._map_problems(client_spec) + self._server_problems()
        sha = metadata_sha256(self.metadata)
        if self.expect_metadata_sha256 and sha != self.expect_metadata_sha256:
            problems.append(
                f"its metadata hash {sha[:12]} is not the run contract's {self.expect_metadata_sha256[:12]} "
                "(a different server or model than the run was created with)"
            )
        if problems:
            raise WireError(f"{self.name} (mapping {self.map.source}): spec mismatch: " + "; ".join(problems))
        self.server_spec = {
            "policy": self.map.policy, "ckpt": self.map.ckpt, "action_dim": self.map.action_dim,
            "server": {"protocol": self.map.protocol, "address": self.address, "metadata_sha256": sha},
        }  # fmt: skip
        return self.server_spec

    def _map_problems(self, spec: dict[str, Any]) -> list[str]:
        problems = []
        if "action_dim" in spec and spec["action_dim"] != self.map.action_dim:
            problems.append(
                f"action_dim: the map says {self.map.action_dim}, the robot takes {spec['action_dim']}"
            )
        if "action" in spec and spec["action"] != self.map.action_convention:
            problems.append(
                f"action convention: the map says the server emits {self.map.action_convention}, "
                f"the sim applies {spec['action']} (ACTION_CONVENTION)"
            )
        offered = spec.get("cameras")
        missing = [cam for cam in self.map.cameras if offered is not None and cam not in offered]
        if missing:
            problems.append(f"cameras: the map uses {missing}, the sim offers {list(offered or [])}")
        size = spec.get("image_size")
        if self.map.image_size and size is not None:
            have = (size, size) if isinstance(size, int) else tuple(size)
            if have != self.map.image_size:
                problems.append(
                    f"image_size: the map says {list(self.map.image_size)}, the sim renders {list(have)}"
                )
        return problems

    def _server_problems(self) -> list[str]:
        problems = [
            f"metadata {key!r}: the map expects {want!r}, "
            f"the server announced {self.metadata.get(key, '<none>')!r}"
            for key, want in self.map.expect.items()
            if self.metadata.get(key) != want
        ]
        if self.map.protocol == "vla-eval":
            problems += self._vla_spec_problems()
        return problems

    def _vla_spec_problems(self) -> list[str]:
        problems = []
        action_spec = self.metadata.get("action_spec") or {}
        dims = [c.get("dims", 0) for c in action_spec.values() if isinstance(c, dict)]
        if dims and all(d > 0 for d in dims) and sum(dims) != self.map.action_dim:
            problems.append(
                f"action_spec: the server declares {sum(dims)} action dims, the map {self.map.action_dim}"
            )
        for component, fmt in self.map.action_spec.items():
            have = (action_spec.get(component) or {}).get("format")
            if have != fmt:
                problems.append(
                    f"action_spec.{component}: the map needs {fmt!r}, the server declares {have!r}"
                )
        needs = {"image": bool(self.map.cameras), "state": self.map.proprio is not None}
        needs["language"] = self.map.instruction is not None
        for component, declared in (self.metadata.get("observation_spec") or {}).items():
            fmt = declared.get("format", "") if isinstance(declared, dict) else ""
            kind = "image" if fmt.startswith("rgb") else "language" if fmt == "language" else component
            if kind in needs and not needs[kind]:
                problems.append(
                    f"observation_spec: the server needs {component!r} ({fmt}), the map gives none"
                )
        return problems

    def _connection(self) -> OpenpiConnection | VlaEvalConnection:
        if self._conn is None:
            try:
                self._conn = open_connection(self.map, self.address, self.settings)
            except WireError as exc:
                raise PeerClosed(f"{self.name} is gone: {exc}") from None
            sha = metadata_sha256(server_metadata(self._conn))
            if sha != metadata_sha256(self.metadata):
                self.close()
                raise PeerClosed(
                    f"{self.name} came back with other metadata (hash {sha[:12]}): not the same policy"
                )
        return self._conn

    def reset(self, task: str, task_config: str, instruction: str, seed: int) -> None:
        """A fresh connection per episode; for vla-eval, EPISODE_START with the task."""
        self._end_episode()
        if self.map.protocol == "openpi" and self._used:
            self._drop()  # openpi's only reset: a new connection (fresh server-side state)
        conn = self._connection()
        if isinstance(conn, VlaEvalConnection):
            task_info = {
                "name": task,
                "task_config": task_config,
                "instruction": instruction,
                "seed": int(seed),
            }
            self._guard(conn.start_episode, {"task": task_info})
            self._in_episode = True
        self._used = True

    def infer(self, obs: dict[str, Any], step: int) -> np.ndarray:
        """The action chunk for `obs`: float32 [chunk_len, action_dim]."""
        conn = self._connection()
        request = self._external_obs(obs)
        reply = self._guard(conn.infer if isinstance(conn, OpenpiConnection) else conn.act, request)
        return self._chunk(reply)

    def _guard(self, call: Any, arg: Any) -> Any:
        """Run one exchange; a failure mid-episode is this episode's error (WireError), never the unit's."""
        try:
            return call(arg)
        except PeerClosed as exc:
            self._drop()
            raise WireError(f"{self.name} closed the connection mid-episode: {exc}") from None
        except WireError as exc:
            self._drop()  # the stream may hold a late reply now: start the next episode afresh
            raise WireError(f"{self.name}: {exc}") from None

    def _external_obs(self, obs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for cam, key in self.map.cameras.items():
            put_path(out, key, obs["images"][cam])
        if self.map.proprio is not None:
            put_path(out, self.map.proprio, np.asarray(obs["proprio"], dtype=np.float32))
        if self.map.instruction is not None:
            put_path(out, self.map.instruction, str(obs.get("instruction", "")))
        return out

    def _chunk(self, reply: dict[str, Any]) -> np.ndarray:
        try:
            value = get_path(reply, self.map.action, "the reply")
        except KeyError as exc:
            raise WireError(f"{self.name}: {exc.args[0]} (keys: {sorted(map(str, reply))[:8]})") from None
        dim = self.map.action_dim
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
            what = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise WireError(f"{self.name}: action must be a float array, got {what}")
        chunk = value[None] if value.ndim == 1 else value
        if chunk.ndim != 2 or chunk.shape[0] < 1 or chunk.shape[1] != dim:
            raise WireError(
                f"{self.name}: action has shape {list(value.shape)}, expected [T, {dim}] or [{dim}]"
            )
        if not np.all(np.isfinite(chunk)):
            raise WireError(f"{self.name}: action holds non-finite numbers")
        return np.array(chunk, dtype=np.float32)

    def _end_episode(self) -> None:
        if self._in_episode and isinstance(self._conn, VlaEvalConnection):
            try:
                self._conn.end_episode({})
            except WireError:
                self._drop()
        self._in_episode = False

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._in_episode = False

    def close(self) -> None:
        self._end_episode()
        self._drop()

    def __enter__(self) -> ExternalPolicyClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
