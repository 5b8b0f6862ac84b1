"""The observation/action mapping of an external policy server (POLICY_SERVER_MAP), and its loader.

An external server (openpi's or vla-eval's protocol) names its inputs its own way; the mapping says
which of our cameras go under which of its keys, at what image size, where the proprio and the
instruction go, and which key of its reply holds the actions. A key is a string (a flat key, even
one containing "/", as openpi's `observation/image`) or a list of strings (a nested path, as
vla-eval's `[images, agentview]`). Example (openpi, LIBERO-style keys):

    protocol: openpi          # openpi | vla-eval
    policy: pi0-libero        # the policy name in records and result paths
    ckpt: ""                  # optional checkpoint label for records
    action_dim: 10            # numbers per action the server returns (checked against the robot)
    cameras: {base_camera: observation/image}
    image_size: 224           # must be what the sim renders (IMAGE_SIZE): checked at hello
    proprio: observation/state
    instruction: prompt
    action: actions           # reply key of the chunk [T, action_dim] (or one action [action_dim])
    action_convention: ee6d   # what the actions mean (harness.episode.bench.conventions); must be
                              # the sim's ACTION_CONVENTION: checked at hello
    expect: {}                # metadata entries the server must announce (its hello), checked
    action_spec: {}           # vla-eval: component -> format the server must declare, checked

Every problem is a `PolicyMapError` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.process.failures import Refused

PROTOCOLS = ("openpi", "vla-eval")
Key = tuple[str, ...]  # a path into a nested map; a flat key is a path of one
_FIELDS = {
    "protocol", "policy", "ckpt", "action_dim", "cameras", "image_size", "proprio", "instruction",
    "action", "action_convention", "expect", "action_spec",
}  # fmt: skip


class PolicyMapError(Refused):
    """A mapping file that cannot be used."""


@dataclass(frozen=True)
class PolicyMap:
    protocol: str
    policy: str
    action_dim: int
    cameras: dict[str, Key]
    image_size: tuple[int, int] | None
    proprio: Key | None
    instruction: Key | None
    action: Key
    ckpt: str = ""
    action_convention: str = "ee6d"
    expect: dict[str, Any] = field(default_factory=dict)
    action_spec: dict[str, str] = field(default_factory=dict)
    source: str = ""  # the file it came from, for messages
    sha256: str = ""  # of the file's text: goes into the run's contract


def _key(value: Any, where: str) -> Key:
    if isinstance(value, str) and value:
        return (value,)
    if isinstance(value, list) and value and all(isinstance(p, str) and p for p in value):
        return tuple(value)
    raise PolicyMapError(f"{where}: expected a key (a string, or a list of strings for a nested path)")


def _size(value: Any, where: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if type(value) is int and value > 0:
        return (value, value)
    if isinstance(value, list) and len(value) == 2 and all(type(v) is int and v > 0 for v in value):
        return (value[0], value[1])
    raise PolicyMapError(f"{where}: expected a positive integer or [height, width], got {value!r}")


def parse_policy_map(data: Any, source: str, sha256: str = "") -> PolicyMap:
    """A PolicyMap from the YAML's parsed content; `source` names it in errors."""
    if not isinstance(data, dict):
        raise PolicyMapError(f"{source}: expected a mapping of settings, got {type(data).__name__}")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise PolicyMapError(f"{source}: unknown field(s) {unknown}: expected some of {sorted(_FIELDS)}")
    protocol = data.get("protocol")
    if protocol not in PROTOCOLS:
        raise PolicyMapError(f"{source}: protocol: expected one of {list(PROTOCOLS)}, got {protocol!r}")
    policy = data.get("policy")
    if not isinstance(policy, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", policy):
        raise PolicyMapError(f"{source}: policy: expected a name of letters, digits, '-', '_', '.'")
    dim = data.get("action_dim")
    if type(dim) is not int or dim < 1:
        raise PolicyMapError(f"{source}: action_dim: expected a positive integer, got {dim!r}")
    cameras = data.get("cameras") or {}
    if not isinstance(cameras, dict) or not all(isinstance(c, str) for c in cameras):
        raise PolicyMapError(f"{source}: cameras: expected a map of our camera name -> server key")
    for name in ("expect", "action_spec"):
        if not isinstance(data.get(name) or {}, dict):
            raise PolicyMapError(f"{source}: {name}: expected a map")
    optional = {
        n: None if data.get(n) is None else _key(data[n], f"{source}: {n}")
        for n in ("proprio", "instruction")
    }
    return PolicyMap(
        protocol=protocol, policy=policy, action_dim=dim,
        cameras={cam: _key(key, f"{source}: cameras.{cam}") for cam, key in cameras.items()},
        image_size=_size(data.get("image_size"), f"{source}: image_size"),
        proprio=optional["proprio"], instruction=optional["instruction"],
        action=_key(data.get("action", "actions"), f"{source}: action"),
        ckpt=str(data.get("ckpt") or ""), action_convention=str(data.get("action_convention") or "ee6d"),
        expect=dict(data.get("expect") or {}),
        action_spec={str(k): str(v) for k, v in (data.get("action_spec") or {}).items()},
        source=source, sha256=sha256,
    )  # fmt: skip


def load_policy_map(path: str | Path, knob: str = "POLICY_SERVER_MAP") -> PolicyMap:
    """Read and check the mapping file at `path`, which the knob `knob` named (for messages)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PolicyMapError(f"{knob}={path}: cannot read it: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyMapError(f"{path}: not valid YAML: {exc}") from None
    return parse_policy_map(data, str(path), hashlib.sha256(text.encode()).hexdigest())


def get_path(data: Any, key: Key, where: str) -> Any:
    """The value at `key` in nested maps; a missing key is an error naming it and `where`."""
    for part in key:
        if not isinstance(data, dict) or part not in data:
            raise KeyError(f"{where} has no {'/'.join(key) if len(key) == 1 else list(key)!s}")
        data = data[part]
    return data


def put_path(data: dict[str, Any], key: Key, value: Any) -> None:
    """Set `key` (a nested path) in `data`, creating the maps on the way."""
    for part in key[:-1]:
        data = data.setdefault(part, {})
    data[key[-1]] = value
