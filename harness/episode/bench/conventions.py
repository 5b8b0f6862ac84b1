"""Action conventions: what the numbers of one action mean, and which ManiSkill controller applies them.

Policies emit different action spaces; the sim must apply the one the policy emits, or the run is
silently wrong. ACTION_CONVENTION (a contract knob; empty = the benchmark's own, ManiSkill's is
`ee6d`) picks the one the sim client applies, the client declares it in the hello (`action`), the
policy wrapper's yml states what it emits (`action_convention`, a name or a list; default `ee6d`),
and the wire refuses a pairing where they differ, naming both. Per arm:

- `ee6d`: the absolute TCP pose in the robot's root frame: xyz (m), rot6d (the first two columns of
  the rotation matrix), gripper: 10 numbers. ManiSkill's `pd_ee_pose`.
- `ee_delta`: the TCP pose change of one step: dxyz (m, root frame), then the rotation change as XYZ
  Euler angles (rad) about root-aligned axes at the TCP (R_new = R_delta @ R_now), gripper: 7 numbers.
  ManiSkill's `pd_ee_delta_pose` (from the current pose, not the last target); a step beyond its
  limits (0.1 m per axis, 0.1 rad of rotation) is clipped by the controller.
- `joint_pos`: absolute arm joint targets (rad; 7 for a Panda), gripper: 8 numbers. `pd_joint_pos`.

Gripper, in every convention: +1 open, -1 closed (ManiSkill maps [-1, 1] onto finger targets
-0.01 ... 0.04 m); vla-eval calls this `binary_close_negative`. Proprio is the robot's state laid out
like an absolute action of the convention (ee6d pose; for `ee_delta` the TCP pose as xyz + XYZ Euler
+ gripper; joint positions + gripper), so FAKE_PROPRIO keeps its shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Convention:
    """One action convention: its per-arm components `(name, dims)` and the controller it drives."""

    name: str
    control_mode: str
    components: tuple[tuple[str, int], ...]

    @property
    def arm_dim(self) -> int:
        return sum(dims for _, dims in self.components)

    def smoothed_dims(self, arms: int, smooth_rot: bool) -> np.ndarray:
        """Indices ACTION_SMOOTH touches: every component but the gripper (and rotation unless smooth_rot)."""
        per_arm, start = [], 0
        for name, dims in self.components:
            if name != "gripper" and (smooth_rot or name != "rotation"):
                per_arm.extend(range(start, start + dims))
            start += dims
        return np.array([arm * self.arm_dim + i for arm in range(arms) for i in per_arm], dtype=np.int64)


CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in [
        Convention("ee6d", "pd_ee_pose", (("position", 3), ("rotation", 6), ("gripper", 1))),
        Convention("ee_delta", "pd_ee_delta_pose", (("position", 3), ("rotation", 3), ("gripper", 1))),
        Convention("joint_pos", "pd_joint_pos", (("joints", 7), ("gripper", 1))),
    ]
}
DEFAULT = "ee6d"


def get_convention(name: str) -> Convention:
    """The convention ACTION_CONVENTION names (empty: `ee6d`); an unknown name is a clear error."""
    key = name.strip() or DEFAULT
    if key not in CONVENTIONS:
        raise ValueError(f"knob ACTION_CONVENTION={name!r}: expected one of {', '.join(CONVENTIONS)}")
    return CONVENTIONS[key]


# MetaWorld's own (BENCHMARK=metaworld; not a ManiSkill controller, so not in CONVENTIONS): the mocap
# target's xyz change (1 = 0.01 m, clipped to [-1, 1]), then the gripper effort: +1 closes, -1 opens
METAWORLD = Convention("metaworld", "mocap_delta_xyz", (("position", 3), ("gripper", 1)))
