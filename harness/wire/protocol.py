"""Message shapes, the hello handshake and the spec check shared by both ends.

Every request gets exactly one reply: a message of the same `type`, or `{"type": "error", ...}`.
The hello and its reply are always JSON (so either end can read them before a codec is agreed);
every later frame uses the codec the server picked from the client's list.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.wire.errors import RemoteError, WireError

PROTOCOL_VERSION = 1
REQUEST_TYPES = ("hello", "reset", "infer", "ping")

# Required fields of each request, and the Python types they must have.
_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "hello": {"version": int, "codecs": list, "spec": dict},
    "reset": {"task": str, "task_config": str, "instruction": str, "seed": int},
    "infer": {"obs": dict, "step": int},
    "ping": {},
}


def hello(spec: dict[str, Any], codecs: list[str], token: str | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"type": "hello", "version": PROTOCOL_VERSION, "codecs": codecs, "spec": spec}
    if token is not None:
        msg["token"] = token
    return msg


def reset(task: str, task_config: str, instruction: str, seed: int) -> dict[str, Any]:
    return {
        "type": "reset",
        "task": task,
        "task_config": task_config,
        "instruction": instruction,
        "seed": seed,
    }


def infer(obs: dict[str, Any], step: int) -> dict[str, Any]:
    return {"type": "infer", "obs": obs, "step": step}


def error(message: str) -> dict[str, Any]:
    return {"type": "error", "message": message}


def check_request(msg: dict[str, Any]) -> str:
    """The request's type, after checking it is known and carries its fields with the right types."""
    kind = msg.get("type")
    if kind not in _FIELDS:
        raise WireError(f"unknown message type {kind!r}: expected one of {list(REQUEST_TYPES)}")
    for name, expected in _FIELDS[kind].items():
        value = msg.get(name)
        # bool is an int subclass; a seed or step of `true` is a malformed request.
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise WireError(
                f"{kind} message: field {name!r} must be {_type_name(expected)}, got {value!r:.80}"
            )
    return kind


def _type_name(expected: type | tuple[type, ...]) -> str:
    return expected.__name__ if isinstance(expected, type) else "/".join(t.__name__ for t in expected)


def check_reply(reply: dict[str, Any], request_type: str) -> dict[str, Any]:
    """The reply to a `request_type` request; an `error` reply raises RemoteError with its text."""
    kind = reply.get("type")
    if kind == "error":
        raise RemoteError(str(reply.get("message", "<no message>")))
    if kind != request_type:
        raise WireError(f"expected a {request_type!r} reply, got {kind!r}")
    return reply


def check_specs(server: dict[str, Any], client: dict[str, Any]) -> None:
    """Refuse a pairing whose specs disagree, naming both values: a mismatch is never a warning."""
    problems = []
    if "action_dim" in server and "action_dim" in client and server["action_dim"] != client["action_dim"]:
        problems.append(
            f"action_dim: policy produces {server['action_dim']}, robot takes {client['action_dim']}"
        )
    problems.extend(_convention_problems(server, client))
    wanted = list(server.get("cameras") or [])
    offered = client.get("cameras")
    if wanted and offered is not None:
        missing = [cam for cam in wanted if cam not in offered]
        if missing:
            problems.append(f"cameras: policy wants {wanted}, sim offers {list(offered)} (missing {missing})")
    s_size, c_size = server.get("image_size"), client.get("image_size")
    if s_size is not None and c_size is not None and _size(s_size) != _size(c_size):
        problems.append(f"image_size: policy wants {s_size}, sim renders {c_size}")
    if problems:
        raise WireError("spec mismatch: " + "; ".join(problems))


def _convention_problems(server: dict[str, Any], client: dict[str, Any]) -> list[str]:
    """The sim's action convention (`action`) must be one the policy states it emits (a name or
    list; `any`: it acts in whichever the sim applies)."""
    emits, applies = server.get("action"), client.get("action")
    if emits is None or applies is None or emits == "any":
        return []
    emitted = [emits] if isinstance(emits, str) else list(emits)
    if applies in emitted:
        return []
    return [
        f"action convention: policy emits {emitted} (action_convention in its deploy_policy.yml), "
        f"sim applies {applies!r} (ACTION_CONVENTION)"
    ]


def _size(value: Any) -> tuple[int, int]:
    """224 and [224, 224] name the same square image size."""
    return (value, value) if isinstance(value, int) else tuple(value)


def as_chunk(value: Any, spec: dict[str, Any]) -> np.ndarray:
    """An action chunk from an infer reply: float32 [chunk_len, action_dim], checked against the spec."""
    if not isinstance(value, np.ndarray) or value.ndim != 2:
        raise WireError(
            f"infer reply: actions must be a 2-D array, got {getattr(value, 'shape', value)!r:.80}"
        )
    dim = spec.get("action_dim")
    if dim is not None and value.shape[1] != dim:
        raise WireError(f"infer reply: action chunk has {value.shape[1]} dims, the server spec says {dim}")
    return np.array(value, dtype=np.float32)
