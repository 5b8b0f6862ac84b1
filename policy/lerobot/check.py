"""Whether a LeRobot checkpoint can be served, read from its config.json and our feature map alone.

Run creation calls `problems` in the sim env, which has no LeRobot and no torch: a checkpoint whose
policy type, observation history or input features we cannot serve is refused there, one line per
problem naming what is missing, instead of when its model server starts on a node. The model server
(deploy_policy.py) calls the same functions before it loads anything.

The feature map (deploy_policy.yml `feature_map`, a YAML file) says where each of the policy's
input features comes from in our observation, as the external servers' policy maps do:

    observation.image: images/corner2   # a camera: HxWx3 uint8 -> [3, H, W] float in [0, 1]
    observation.state: proprio          # the robot's proprio vector, float32

The instruction always goes to LeRobot's `task`. Output: the `action` feature, its chunk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

# policy types that answer from the current observation alone (n_obs_steps 1) through
# `predict_action_chunk`, in lerobot 0.4.4's factory; the ones with an observation history
# (diffusion, vqbet: n_obs_steps > 1) keep it inside the policy object, per episode: not served yet
SERVED_TYPES = ("act", "pi0", "pi05", "smolvla", "groot", "xvla", "wall_x")
DETERMINISTIC_TYPES = ("act",)  # draw nothing at inference: requests batch into one call
SOURCES = ("proprio",)  # besides images/<camera>


def read_config(ckpt: Path) -> dict[str, Any]:
    """The checkpoint's config.json (LeRobot's PreTrainedConfig as saved), refused if unreadable."""
    path = ckpt / "config.json"
    try:
        config = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object (a LeRobot policy config)")
    return config


def read_map(path: Path) -> dict[str, str]:
    """The feature map {LeRobot input feature: our observation's source}."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"feature map {path}: cannot read it: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"feature map {path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise ValueError(f"feature map {path}: expected a mapping of feature name -> source (strings)")
    return raw


def map_path(usr_args: dict[str, Any], wrapper_dir: Path) -> Path:
    """The yml's `feature_map`, relative to the wrapper's directory unless absolute."""
    path = Path(str(usr_args.get("feature_map") or "maps/metaworld.yml"))
    return path if path.is_absolute() else wrapper_dir / path


def problems(ckpt: Path, usr_args: dict[str, Any], wrapper_dir: Path, cameras: list[str] | None) -> list[str]:
    """One line per reason the checkpoint at `ckpt` cannot be served through the feature map;
    `cameras`: the benchmark's cameras, or None when the benchmark does not say."""
    try:
        config = read_config(ckpt)
        feature_map = read_map(map_path(usr_args, wrapper_dir))
    except ValueError as exc:
        return [str(exc)]
    where = f"LeRobot checkpoint {ckpt}"
    kind = config.get("type")
    if kind not in SERVED_TYPES:
        served = ", ".join(SERVED_TYPES)
        return [f"{where}: policy type {kind!r} is not served (served: {served}; "
                "diffusion and vqbet keep an observation history in the policy, per episode)"]  # fmt: skip
    out = []
    if config.get("n_obs_steps", 1) != 1:
        out.append(f"{where}: n_obs_steps={config.get('n_obs_steps')}: only policies that read the "
                   "current observation (n_obs_steps 1) are served")  # fmt: skip
    inputs = config.get("input_features") or {}
    if not isinstance(inputs, dict) or not inputs:
        return [*out, f"{where}: config.json declares no input_features"]
    unmapped = sorted(set(inputs) - set(feature_map))
    if unmapped:
        out.append(f"{where}: input feature(s) {unmapped} have no source in the feature map "
                   f"{map_path(usr_args, wrapper_dir)} (it maps {sorted(feature_map)})")  # fmt: skip
    for feature, source in feature_map.items():
        if feature not in inputs:
            continue  # a map may serve several checkpoints
        kind_of = (inputs[feature] or {}).get("type")
        camera = source.removeprefix("images/") if source.startswith("images/") else None
        if kind_of == "VISUAL" and camera is None:
            out.append(
                f"{where}: feature {feature} is an image; its source {source!r} must be images/<camera>"
            )
        elif kind_of != "VISUAL" and source not in SOURCES:
            out.append(
                f"{where}: feature {feature} ({kind_of}): source {source!r} is not one of {list(SOURCES)}"
            )
        elif camera is not None and cameras is not None and camera not in cameras:
            out.append(f"feature map {map_path(usr_args, wrapper_dir)}: {feature} reads camera {camera!r}, "
                       f"which the benchmark does not render (its cameras: {cameras})")  # fmt: skip
    if "action" not in (config.get("output_features") or {}):
        out.append(f"{where}: config.json declares no 'action' output feature")
    return out


def action_shape(config: dict[str, Any]) -> tuple[int, int]:
    """(chunk_len, action_dim) the server answers with: the policy's `n_action_steps` actions of
    its chunk (what LeRobot's own select_action plays before it asks again)."""
    dim = int(config["output_features"]["action"]["shape"][-1])
    return int(config.get("n_action_steps") or 1), dim
