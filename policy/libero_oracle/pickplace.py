"""A scripted pick-and-place controller on LIBERO's privileged state: the oracle's motion.

Why it exists: a policy wrapper that solves LIBERO's `in <object> <region>` goals (libero_object:
"pick up X and place it in the basket") proves the whole path (observation, 7-D delta actions,
gripper sign, success check) without a trained model. It reads only the observation's
`privileged_state` (object poses, region sites, the BDDL goal, the end effector) and answers the
same actions a policy sends: delta position (1 = 0.05 m), delta axis-angle (1 = 0.5 rad), gripper
+1 close / -1 open. Phases: above the object, down, close, lift, over the region, down, open, up.
The gripper keeps the orientation it had at the episode's first step. A grasp that closes on
nothing (fingers shut) goes back to the approach.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

POS_SCALE = 0.05  # m of end-effector motion at action 1 (robosuite OSC_POSE output_max)
ROT_SCALE = 0.5  # rad at action 1
GAIN = 1.0  # fraction of the remaining position error commanded per step
MAX_ACTION = 0.6  # per-axis cap on the position action (3 cm a step)
HOVER = 0.10  # m above the grasp point before descending
GRASP_DEPTH = 0.01  # m below the object's body origin the fingers aim for (the table may stop them first)
CARRY = 0.12  # m above the region site while carrying
DROP = 0.06  # m above the region site where the object is let go
REACHED = 0.012  # m: a waypoint counts as reached within this distance
CLOSE_STEPS = 12
OPEN_STEPS = 10
PHASE_LIMIT = 60  # steps a moving phase may take before the controller moves on anyway
STALLED = 0.001  # m a step: the descent has stopped (fingers on the table or on the object)
EMPTY_GRIP = 0.004  # finger opening (m, both fingers) below which the grasp holds nothing


@dataclass
class Plan:
    """One episode's progress: the phase, how long it has lasted, the orientation to keep."""

    phase: str = "approach"
    steps: int = 0
    hold_quat: np.ndarray | None = None
    last_eef: np.ndarray | None = None
    log: list[str] = field(default_factory=list)

    def restart(self) -> None:
        """A new episode: from the approach, with the orientation of its first step."""
        self.phase, self.steps, self.hold_quat, self.last_eef = "approach", 0, None, None
        self.log.clear()

    def enter(self, phase: str) -> None:
        self.phase, self.steps = phase, 0
        self.log.append(phase)


def pick_and_place_goal(goal: list[list[str]]) -> tuple[str, str]:
    """(object, region site) of the goal's `in`/`on` predicate; any other goal is a clear error."""
    for predicate in goal:
        if len(predicate) == 3 and predicate[0].lower() in ("in", "on"):
            return predicate[1], predicate[2]
    raise ValueError(f"libero_oracle: no pick-and-place predicate ('in'/'on' X Y) in the goal {goal}")


def place_target(state: dict[str, Any], region: str) -> np.ndarray:
    """Where the object goes: the region site if there is one, else the named object's position."""
    if region in state["sites"]:
        return np.asarray(state["sites"][region], np.float64)
    if region in state["objects"]:
        return np.asarray(state["objects"][region], np.float64)[:3]
    raise ValueError(f"libero_oracle: goal region {region!r} is neither a site nor an object of the scene")


def next_action(state: dict[str, Any], plan: Plan) -> np.ndarray:
    """The 7-D action for this step; advances `plan`."""
    target_name, region = pick_and_place_goal(state["goal"])
    if target_name not in state["objects"]:
        raise ValueError(f"libero_oracle: goal object {target_name!r} is not in the scene")
    eef = np.asarray(state["eef_pos"], np.float64)
    quat = np.asarray(state["eef_quat"], np.float64)
    if plan.hold_quat is None:
        plan.hold_quat = quat
    obj = np.asarray(state["objects"][target_name], np.float64)[:3]
    place = place_target(state, region)
    opening = float(np.sum(np.abs(state["gripper_qpos"])))
    grasp = _up(obj, -GRASP_DEPTH)
    moved = np.inf if plan.last_eef is None else float(np.linalg.norm(eef - plan.last_eef))
    waypoint, grip = _waypoint(plan, eef, grasp, place, opening, moved)
    plan.steps += 1
    plan.last_eef = eef
    move = np.clip(GAIN * (waypoint - eef) / POS_SCALE, -MAX_ACTION, MAX_ACTION)
    turn = np.clip(axis_angle(quat_mul(plan.hold_quat, quat_conj(quat))) / ROT_SCALE, -1, 1)
    return np.concatenate([move, turn, [grip]]).astype(np.float32)


def _waypoint(
    plan: Plan, eef: np.ndarray, grasp: np.ndarray, place: np.ndarray, opening: float, moved: float
) -> tuple[np.ndarray, float]:
    """This phase's target position and gripper command, after moving on if the phase is done."""
    near = lambda point: float(np.linalg.norm(point - eef)) < REACHED or plan.steps >= PHASE_LIMIT  # noqa: E731
    above = _up(grasp, HOVER)
    carry = _up(place, CARRY)
    if plan.phase == "approach" and near(above):
        plan.enter("descend")
    elif plan.phase == "descend" and (near(grasp) or (plan.steps > 3 and moved < STALLED)):
        plan.enter("close")
    elif plan.phase == "close" and plan.steps >= CLOSE_STEPS:
        plan.enter("lift" if opening > EMPTY_GRIP else "approach")
    elif plan.phase == "lift" and (eef[2] >= carry[2] - REACHED or plan.steps >= PHASE_LIMIT):
        plan.enter("carry")
    elif plan.phase == "carry" and near(carry):
        plan.enter("lower")
    elif plan.phase == "lower" and near(_up(place, DROP)):
        plan.enter("release")
    elif plan.phase == "release" and plan.steps >= OPEN_STEPS:
        plan.enter("retreat")
    lift_to = np.array([eef[0], eef[1], carry[2]])
    targets = {
        "approach": (above, -1.0), "descend": (grasp, -1.0), "close": (grasp, 1.0), "lift": (lift_to, 1.0),
        "carry": (carry, 1.0), "lower": (_up(place, DROP), 1.0), "release": (eef, -1.0),
        "retreat": (carry, -1.0),
    }  # fmt: skip
    return targets[plan.phase]


def _up(point: np.ndarray, dz: float) -> np.ndarray:
    return point + np.array([0.0, 0.0, dz])


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of quaternions in xyzw order."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array([
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    ])  # fmt: skip


def quat_conj(q: np.ndarray) -> np.ndarray:
    return np.array([-q[0], -q[1], -q[2], q[3]])


def axis_angle(q: np.ndarray) -> np.ndarray:
    """The rotation of quaternion `q` (xyzw) as an axis-angle vector, the short way round."""
    q = q / np.linalg.norm(q)
    if q[3] < 0:
        q = -q
    sin_half = float(np.linalg.norm(q[:3]))
    if sin_half < 1e-9:
        return np.zeros(3)
    return q[:3] / sin_half * 2.0 * np.arctan2(sin_half, q[3])
