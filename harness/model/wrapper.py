"""A policy wrapper on disk, before anything is loaded: where it is, its deploy_policy.yml settings
with `--set` overrides, its batch settings, the action conventions it states, and its module.

Run creation reads these without loading a model (`stated_conventions`, `stated_checkpoint`);
`policyload` loads the wrapper with them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from harness.config.paths import CODE_ROOT
from harness.process.failures import Refused


class PolicyRefused(Refused):
    """A policy that cannot be loaded as given: the message names the input (its name, a setting, an
    override, its checkpoint) and what to change. What goes wrong once it runs is `PolicyCallFailed`."""


def policy_dir(name: str) -> Path:
    """`name` under $EVAL_ROOT/policy/, or a directory path (test doubles live under tests/)."""
    if "/" in name:
        path = Path(name).resolve()
    elif re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        path = Path(os.environ.get("EVAL_ROOT") or CODE_ROOT) / "policy" / name
    else:
        raise PolicyRefused(f"policy name {name!r}: expected a name under policy/ or a directory path")
    if not (path / "deploy_policy.py").is_file():
        raise PolicyRefused(f"policy {name!r}: no deploy_policy.py in {path}")
    return path


def parse_override(item: str) -> tuple[str, Any]:
    """`key=value` with a YAML value (numbers, booleans, lists), so overrides type like the yml."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise PolicyRefused(f"override {item!r}: expected key=value")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise PolicyRefused(f"override {item!r}: value is not valid YAML: {exc}") from None


def batch_size(usr_args: dict[str, Any], yml: Path, cap: int) -> int | None:
    """The wrapper's max_batch capped by `cap` (MODEL_MAX_BATCH, 0: no cap), or None when it
    declares none; a bad setting is refused naming it."""
    declared = usr_args.get("max_batch")
    if declared is not None and (not isinstance(declared, int) or isinstance(declared, bool) or declared < 1):
        raise PolicyRefused(
            f"policy {yml.parent.name}: setting 'max_batch' must be an integer >= 1 "
            f"in {yml} or --set, got {declared!r}"
        )
    if declared is not None and cap:
        declared = min(declared, cap)
    return declared


def deploy_settings(directory: Path, overrides: list[str] | None) -> tuple[Path, dict[str, Any]]:
    """The wrapper's deploy_policy.yml settings with `overrides` applied (and the yml's path)."""
    yml = directory / "deploy_policy.yml"
    usr_args = (yaml.safe_load(yml.read_text()) if yml.is_file() else None) or {}
    if not isinstance(usr_args, dict):
        raise PolicyRefused(f"{yml}: expected a mapping of settings")
    usr_args.update(parse_override(item) for item in overrides or [])
    return yml, usr_args


def stated_conventions(name: str, overrides: list[str] | None = None) -> list[str] | str:
    """The action conventions wrapper `name` states it emits (yml + overrides), without loading it."""
    yml, usr_args = deploy_settings(policy_dir(name), overrides)
    return action_conventions(usr_args.get("action_convention"), yml)


def stated_checkpoint(name: str, overrides: list[str] | None = None) -> tuple[Path, Any]:
    """(the yml, what wrapper `name` says it loads from its checkpoint: its `needs_checkpoint`
    setting, None when it needs none), unchecked: `harness.config.checkpoint` reads it."""
    yml, usr_args = deploy_settings(policy_dir(name), overrides)
    return yml, usr_args.get("needs_checkpoint")


MODEL_ENVS = ("model", "lerobot")  # the envs a model server may run in (scripts/setup.sh makes both)


def server_python(name: str, overrides: list[str] | None, env: dict[str, str]) -> str:
    """The Python that runs wrapper `name`'s model server: its yml's `model_env` (default `model`)
    named by `<ENV>_PY` in `env` (MODEL_PY, LEROBOT_PY: the node's staged copy when staged)."""
    yml, usr_args = deploy_settings(policy_dir(name), overrides)
    model_env = usr_args.get("model_env", "model")
    if model_env not in MODEL_ENVS:
        raise PolicyRefused(f"{yml}: model_env must be one of {list(MODEL_ENVS)}, got {model_env!r}")
    python = env.get("LEROBOT_PY") if model_env == "lerobot" else env.get("MODEL_PY")
    return python or "python"


def stated_problems(
    name: str, overrides: list[str] | None, ckpt: Path | None, cameras: list[str] | None
) -> list[str]:
    """What wrapper `name`'s own check says of checkpoint `ckpt`, without loading a model: a wrapper
    may ship `check.py` with `problems(ckpt, usr_args, wrapper_dir, cameras) -> list[str]`, which
    must import in the sim env (no torch). `cameras`: the benchmark's, None when it does not say."""
    directory = policy_dir(name)
    if ckpt is None or not (directory / "check.py").is_file():
        return []
    _, usr_args = deploy_settings(directory, overrides)
    module = _import_file(directory / "check.py", f"policy_check_{directory.name}")
    return list(module.problems(ckpt, usr_args, directory, cameras))


ANY = "any"  # a wrapper's action_convention and action_dim when it acts in the sim's (hold)


def action_conventions(value: Any, yml: Path) -> list[str] | str:
    """The conventions a wrapper's actions are in (`action_convention`: a name or a list; default
    ee6d; `any`: whichever the sim applies, told in each observation's `episode`)."""
    if value == ANY:
        return ANY
    names = ["ee6d"] if value is None else [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise PolicyRefused(f"{yml}: action_convention must be a convention name or a list, got {value!r}")
    return names


def _import_file(file: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise PolicyRefused(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as a normal import would: dataclasses and pickle look it up
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        del sys.modules[spec.name]
        raise PolicyRefused(
            f"{file} imports {exc.name!r}, which {sys.executable} cannot import: install it in the "
            f"env its deploy_policy.yml names (model_env: {list(MODEL_ENVS)}) or run the server with "
            "a Python that has it"
        ) from None
    return module


def import_wrapper(directory: Path) -> ModuleType:
    file = directory / "deploy_policy.py"
    module = _import_file(file, f"deploy_policy_{directory.name}")
    for attr in ("get_model", "encode_obs", "reset_model"):
        if not callable(getattr(module, attr, None)):
            raise PolicyRefused(f"{file}: missing function {attr}()")
    return module
