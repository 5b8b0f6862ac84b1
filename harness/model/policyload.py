"""Loading a policy wrapper once and calling it: the model side's half of the policy contract.

A wrapper is `policy/<name>/deploy_policy.py` + `deploy_policy.yml` (or any directory holding
those two files). `get_model(usr_args)` loads it; per request `encode_obs(obs)` returns the keyword
arguments of `model.generate_actions(...)`, which returns [B, num_actions, action_dim].
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import yaml

from harness.config.failures import Refused
from harness.config.paths import CODE_ROOT, resolve_checkpoint


class PolicyError(Refused):
    """A policy that cannot be loaded, or whose output breaks the contract."""


def policy_dir(name: str) -> Path:
    """`name` under $EVAL_ROOT/policy/, or a directory path (test doubles live under tests/)."""
    if "/" in name:
        path = Path(name).resolve()
    elif re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        path = Path(os.environ.get("EVAL_ROOT") or CODE_ROOT) / "policy" / name
    else:
        raise PolicyError(f"policy name {name!r}: expected a name under policy/ or a directory path")
    if not (path / "deploy_policy.py").is_file():
        raise PolicyError(f"policy {name!r}: no deploy_policy.py in {path}")
    return path


def parse_override(item: str) -> tuple[str, Any]:
    """`key=value` with a YAML value (numbers, booleans, lists), so overrides type like the yml."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise PolicyError(f"override {item!r}: expected key=value")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise PolicyError(f"override {item!r}: value is not valid YAML: {exc}") from None


def episode_seed(seed: int, step: int) -> int:
    """A 32-bit RNG seed from (episode seed, step): the same request gives the same draw in any order."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{step}".encode(), digest_size=4).digest(), "big")


@dataclass
class LoadedPolicy:
    name: str
    ckpt: str
    module: ModuleType
    model: Any
    usr_args: dict[str, Any]
    spec: dict[str, Any]
    # One model call at a time: the RNG seeding below is global state, and one device serves all.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.module.reset_model(self.model)

    def act(self, obs: dict[str, Any], seed: int, step: int) -> np.ndarray:
        """The action chunk [num_actions, action_dim] float32 for one observation."""
        with self.lock:
            _seed_rngs(episode_seed(seed, step))
            inputs = self.module.encode_obs(obs)
            if not isinstance(inputs, dict):
                raise PolicyError(f"{self.name}.encode_obs must return a dict of generate_actions kwargs")
            out = self.model.generate_actions(**inputs)
        return self._check(out)

    def _check(self, out: Any) -> np.ndarray:
        if hasattr(out, "detach"):
            out = out.detach().float().cpu().numpy()
        arr = np.asarray(out, dtype=np.float32)
        want = (self.spec["chunk_len"], self.spec["action_dim"])
        if arr.ndim != 3 or arr.shape[0] < 1 or arr.shape[1:] != want:
            raise PolicyError(
                f"{self.name}.generate_actions returned shape {arr.shape}, expected [B, *{want}]"
            )
        if not np.all(np.isfinite(arr[0])):
            raise PolicyError(f"{self.name}.generate_actions returned non-finite actions")
        return arr[0]


def _seed_rngs(value: int) -> None:
    random.seed(value)
    np.random.seed(value)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(value)


def load_policy(name: str, ckpt: str = "", overrides: list[str] | None = None) -> LoadedPolicy:
    """Import the wrapper and call get_model once with the yml + overrides + ckpt_path."""
    directory = policy_dir(name)
    yml, usr_args = _settings(directory, overrides)
    ckpt_path = resolve_checkpoint(ckpt)
    if ckpt and ckpt_path is None:
        raise PolicyError(f"checkpoint {ckpt!r}: neither a path nor a directory under $BUNDLE/checkpoints")
    usr_args["ckpt_path"] = None if ckpt_path is None else str(ckpt_path)
    usr_args.setdefault("policy_name", directory.name)
    for key in ("action_dim", "num_actions"):
        if not isinstance(usr_args.get(key), int):
            raise PolicyError(f"policy {directory.name}: setting {key!r} must be an integer in {yml}")
    module = _import(directory)
    try:
        model = module.get_model(usr_args)
    except Exception as exc:
        raise PolicyError(f"policy {directory.name}: get_model failed: {type(exc).__name__}: {exc}") from exc
    spec = {
        "policy": directory.name,
        "ckpt": Path(ckpt).name if ckpt else "",
        "action_dim": usr_args["action_dim"],
        "chunk_len": usr_args["num_actions"],
        "cameras": list(usr_args.get("cameras") or []),
    }
    if usr_args.get("image_size") is not None:
        spec["image_size"] = usr_args["image_size"]
    spec["action"] = _action_conventions(usr_args.get("action_convention"), yml)
    return LoadedPolicy(directory.name, spec["ckpt"], module, model, usr_args, spec)


def _settings(directory: Path, overrides: list[str] | None) -> tuple[Path, dict[str, Any]]:
    """The wrapper's deploy_policy.yml settings with `overrides` applied (and the yml's path)."""
    yml = directory / "deploy_policy.yml"
    usr_args = (yaml.safe_load(yml.read_text()) if yml.is_file() else None) or {}
    if not isinstance(usr_args, dict):
        raise PolicyError(f"{yml}: expected a mapping of settings")
    usr_args.update(parse_override(item) for item in overrides or [])
    return yml, usr_args


def stated_conventions(name: str, overrides: list[str] | None = None) -> list[str]:
    """The action conventions wrapper `name` states it emits (yml + overrides), without loading it."""
    yml, usr_args = _settings(policy_dir(name), overrides)
    return _action_conventions(usr_args.get("action_convention"), yml)


def _action_conventions(value: Any, yml: Path) -> list[str]:
    """The conventions a wrapper's actions are in (`action_convention`: a name or a list; default ee6d)."""
    names = ["ee6d"] if value is None else [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise PolicyError(f"{yml}: action_convention must be a convention name or a list, got {value!r}")
    return names


def _import(directory: Path) -> ModuleType:
    file = directory / "deploy_policy.py"
    spec = importlib.util.spec_from_file_location(f"deploy_policy_{directory.name}", file)
    if spec is None or spec.loader is None:
        raise PolicyError(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for attr in ("get_model", "encode_obs", "reset_model"):
        if not callable(getattr(module, attr, None)):
            raise PolicyError(f"{file}: missing function {attr}()")
    return module
