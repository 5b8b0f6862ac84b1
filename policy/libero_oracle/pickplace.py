"""A scripted pick-and-place controller on LIBERO's privileged state: the oracle's motion.

Why it exists: a policy wrapper that solves LIBERO's `in <object> <region>` goals (libero_object:
"pick up X and place it in the basket") proves the whole path (observation, 7-D delta actions,
gripper sign, success check) without a trained model. It reads only the observation's
`privileged_state` (object poses and collision boxes, region sites, the BDDL goal, the end effector)
and answers the same actions a policy sends: delta position (1 = 0.05 m), delta axis-angle
(1 = 0.5 rad), gripper +1 close / -1 open.

Phases: above the object, down, close, lift, over the region, down, open, up. The gripper keeps its
first orientation turned about the vertical so the fingers close across the object's narrow side;
it grasps a little below the object's top, carries it with its bottom clear of the container's top
and lets go just above the region. A grasp that closes on nothing goes back to the approach.
An object wider than the open fingers every way (LIBERO's black bowl: 0.108 m across its rim,
0.09 m at its foot; the pads open 0.076 m apart) is pinched at its wall instead, one finger inside,
one outside, just below the rim: closing across it, the fingers land on the rim or close inside the
bowl on nothing (on MuJoCo 3.3.2, libero_spatial tasks 0, 1, 2 and 5 alike). The wall grasp reads
the rim in the object's own frame, so it holds for a bowl tilted on a ramekin, closes where it
stopped (a pushed bowl is not chased), and carries the object's centre over the region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

POS_SCALE = 0.05  # m of end-effector motion at action 1 (robosuite OSC_POSE output_max)
ROT_SCALE = 0.5  # rad at action 1
GAIN = 2.0  # position action per remaining error (in action units): overcomes the arm's sag under load
MAX_ACTION = 0.8  # per-axis cap on the position action (4 cm a step)
HOVER = 0.08  # m above the grasp point before descending
BELOW_TOP = 0.03  # m below the object's top the fingers close
FLOOR_CLEAR = 0.015  # m: the end effector (between the fingertips) stays this far above the object's bottom
CLEARANCE = 0.04  # m between the carried object's bottom and the container's top
RELEASE_ABOVE = 0.02  # m above the region site the object's bottom is let go
REACHED = 0.01  # m: a waypoint near the object counts as reached within this distance
REACHED_LOADED = 0.025  # m: the same for the waypoints of the carry (the arm sags under the object)
CLOSE_STEPS = 12  # the close lasts this long, and up to twice as long while the fingers still move
CLOSING = 0.001  # m a step the fingers' opening still shrinks by while they close
OPEN_STEPS = 8
PHASE_LIMIT = 60  # steps a moving phase may take before the controller moves on anyway
STALLED = 0.001  # m a step: the descent has stopped (on the floor or the object)
EMPTY_GRIP = 0.003  # finger opening (m, both fingers) at or below which the grasp holds nothing
MAX_GRASP = 0.07  # m: the widest side the open fingers (0.08 m) close on
HAND_HALF = (0.11, 0.04)  # m: the hand's footprint around the fingers (along, across their closing axis)
HAND_ABOVE = 0.035  # m from the end effector up to the hand's lowest part but the fingers
YAW_OFFSETS = np.radians(np.arange(-60, 61, 10))  # grasp directions tried around the narrow side
WALL_IN = 0.006  # m inside the object's side the fingers pinch its wall (mid-wall of LIBERO's bowl)
RIM_BELOW = 0.012  # m below the rim the end effector closes on a wall: the pads (0.017 m tall) just under it
WALL_ANGLES = np.radians(np.arange(0, 360, 30))  # points of the rim tried, in the object's frame
FINGER_SPAN = (0.03, 0.07, 0.015)  # m: a finger's footprint from the end effector (out from, to; half across)
FINGER_BELOW = 0.02  # m from the end effector down to the fingertips, and a margin


@dataclass
class Plan:
    """One episode's progress: the phase, how long it has lasted, the orientation to keep, and how far
    the grasped object hangs below the end effector."""

    phase: str = "approach"
    steps: int = 0
    hold_quat: np.ndarray | None = None
    last_eef: np.ndarray | None = None
    last_opening: float = np.inf
    hang: float = 0.0
    wall: float | None = None  # the rim point pinched (angle in the object's frame); None: across the object
    offset: np.ndarray | None = None  # the held object's centre from the end effector (xy), for a wall grasp
    anchor: np.ndarray | None = None  # where a wall grasp closes: fixed, so a pushed bowl is not chased

    def restart(self) -> None:
        """A new episode: from the approach, with the orientation of its first step."""
        self.phase, self.steps, self.hold_quat, self.last_eef, self.hang = "approach", 0, None, None, 0.0
        self.last_opening = np.inf
        self.wall = self.offset = self.anchor = None

    def enter(self, phase: str) -> None:
        self.phase, self.steps = phase, 0


@dataclass(frozen=True)
class Scene:
    """What one step needs, in world coordinates."""

    eef: np.ndarray
    quat: np.ndarray
    opening: float
    grasp: np.ndarray  # where the end effector closes on the object
    centre: np.ndarray  # the object's box centre
    bottom: float  # the object's lowest point now
    place: np.ndarray  # the region site
    container_top: float


def pick_and_place_goal(goal: list[list[str]]) -> tuple[str, str]:
    """(object, region) of the goal's `in`/`on` predicate; any other goal is a clear error."""
    for predicate in goal:
        if len(predicate) == 3 and predicate[0].lower() in ("in", "on"):
            return predicate[1], predicate[2]
    raise ValueError(f"libero_oracle: no pick-and-place predicate ('in'/'on' X Y) in the goal {goal}")


def read_scene(state: dict[str, Any], wall: float | None = None) -> Scene:
    """The step's scene; `wall`: the grasp pinches the object's wall there (`wall_grasp`)."""
    name, region = pick_and_place_goal(state["goal"])
    if name not in state["objects"]:
        raise ValueError(f"libero_oracle: goal object {name!r} is not in the scene")
    corners = _corners(state["objects"][name], state["boxes"][name])
    top, bottom = float(corners[:, 2].max()), float(corners[:, 2].min())
    centre = corners.mean(axis=0)
    grasp = np.array([centre[0], centre[1], max(top - BELOW_TOP, bottom + FLOOR_CLEAR)])
    if wall is not None:
        grasp = wall_point(state["objects"][name], state["boxes"][name], wall)[0]
    if region in state["sites"]:
        place = np.asarray(state["sites"][region], np.float64)
    elif region in state["objects"]:
        place = np.asarray(state["objects"][region], np.float64)[:3]
    else:
        raise ValueError(f"libero_oracle: goal region {region!r} is no site or object of the scene")
    owner = max((o for o in state["objects"] if o != name and region.startswith(o)), key=len, default=None)
    container_top = float(place[2])
    if owner is not None:
        container_top = float(_corners(state["objects"][owner], state["boxes"][owner])[:, 2].max())
    scene = Scene(
        np.asarray(state["eef_pos"], np.float64), np.asarray(state["eef_quat"], np.float64),
        float(np.sum(np.abs(state["gripper_qpos"]))), grasp, centre, bottom, place, container_top,
    )  # fmt: skip
    return scene


def next_action(state: dict[str, Any], plan: Plan) -> np.ndarray:
    """The 7-D action for this step; advances `plan`."""
    if plan.hold_quat is None:  # the first step: choose the grasp, turn the fingers to its direction
        plan.wall = wall_grasp(state, np.asarray(state["eef_pos"], np.float64))
        scene = read_scene(state, plan.wall)
        name, _ = pick_and_place_goal(state["goal"])
        axis = (grasp_axis(state, scene.grasp) if plan.wall is None
                else wall_point(state["objects"][name], state["boxes"][name], plan.wall)[1])  # fmt: skip
        plan.hold_quat = _yawed_to(scene.quat, axis)
    scene = read_scene(state, plan.wall)
    moved = np.inf if plan.last_eef is None else float(np.linalg.norm(scene.eef - plan.last_eef))
    waypoint, grip = _waypoint(plan, scene, moved)
    plan.steps += 1
    plan.last_eef, plan.last_opening = scene.eef, scene.opening
    move = np.clip(GAIN * (waypoint - scene.eef) / POS_SCALE, -MAX_ACTION, MAX_ACTION)
    turn = np.clip(axis_angle(quat_mul(plan.hold_quat, quat_conj(scene.quat))) / ROT_SCALE, -1, 1)
    return np.concatenate([move, turn, [grip]]).astype(np.float32)


def _waypoint(plan: Plan, s: Scene, moved: float) -> tuple[np.ndarray, float]:
    """This phase's target position and gripper command, after moving on if the phase is done."""

    def near(point: np.ndarray, within: float = REACHED) -> bool:
        return float(np.linalg.norm(point - s.eef)) < within or plan.steps >= PHASE_LIMIT

    closing = plan.last_opening - s.opening > CLOSING  # the fingers have not come to rest yet
    above = s.grasp + np.array([0.0, 0.0, HOVER])
    carry_z = s.container_top + CLEARANCE + plan.hang  # not from `grasp`: that rises with the object
    over = s.place[:2] - (plan.offset if plan.offset is not None else 0.0)  # the object's centre there
    carry = np.array([over[0], over[1], carry_z])
    drop = np.array([over[0], over[1], s.place[2] + RELEASE_ABOVE + plan.hang])
    if plan.phase == "approach" and near(above):
        plan.enter("descend")
    elif plan.phase == "descend" and (near(s.grasp) or (plan.steps > 3 and moved < STALLED)):
        plan.enter("close")
        plan.anchor = s.grasp.copy() if plan.wall is not None else None
    elif plan.phase == "close" and plan.steps >= CLOSE_STEPS * (1 + closing):
        plan.hang = max(float(s.eef[2]) - s.bottom, 0.0)
        plan.offset = s.centre[:2] - s.eef[:2] if plan.wall is not None else None
        plan.enter("lift" if s.opening > EMPTY_GRIP else "approach")
    elif plan.phase == "lift" and (s.eef[2] >= carry_z - REACHED_LOADED or plan.steps >= PHASE_LIMIT):
        plan.enter("carry")
    elif plan.phase == "carry" and near(carry, REACHED_LOADED):
        plan.enter("lower")
    elif plan.phase == "lower" and near(drop, REACHED_LOADED):
        plan.enter("release")
    elif plan.phase == "release" and plan.steps >= OPEN_STEPS:
        plan.enter("retreat")
    grip_at = s.grasp if plan.anchor is None else plan.anchor
    targets = {
        "approach": (above, -1.0), "descend": (s.grasp, -1.0), "close": (grip_at, 1.0),
        "lift": (np.array([s.eef[0], s.eef[1], carry_z]), 1.0), "carry": (carry, 1.0), "lower": (drop, 1.0),
        "release": (s.eef, -1.0), "retreat": (carry, -1.0),
    }  # fmt: skip
    return targets[plan.phase]


def _corners(pose: np.ndarray, box: np.ndarray) -> np.ndarray:
    """The 8 world corners of an object's collision box (`box`: centre and half sizes in its frame)."""
    pose, box = np.asarray(pose, np.float64), np.asarray(box, np.float64)
    signs = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).T.reshape(-1, 3)
    return pose[:3] + (box[:3] + signs * box[3:]) @ rotation(pose[3:]).T


def grasp_axis(state: dict[str, Any], grasp: np.ndarray) -> np.ndarray:
    """The horizontal direction (unit vector) the fingers close along: across the object's narrower
    side, turned by up to 60 degrees where the hand would otherwise come down on a neighbour."""
    name, _ = pick_and_place_goal(state["goal"])
    pose, box = state["objects"][name], np.asarray(state["boxes"][name], np.float64)
    others = [_corners(state["objects"][o], state["boxes"][o]) for o in state["objects"] if o != name]
    axes = rotation(np.asarray(pose, np.float64)[3:])
    flat = [i for i in range(3) if abs(axes[2, i]) < 0.7] or [0, 1]
    narrow, wide = sorted(flat[:2], key=lambda k: float(box[3 + k]))
    base = np.arctan2(axes[1, narrow], axes[0, narrow])

    def cost(offset: float) -> tuple[float, float]:
        width = 2 * (box[3 + narrow] * abs(np.cos(offset)) + box[3 + wide] * abs(np.sin(offset)))
        blocked = _obstruction(grasp, base + offset, others) > grasp[2] + HAND_ABOVE
        return (float(blocked) + float(width > MAX_GRASP) * 2, abs(offset))

    angle = base + min(YAW_OFFSETS, key=cost)
    return np.array([np.cos(angle), np.sin(angle), 0.0])


def wall_grasp(state: dict[str, Any], eef: np.ndarray) -> float | None:
    """Where to pinch the goal object's wall (an angle in its frame), or None where the fingers can
    close across it: an upright object wider than MAX_GRASP on both sides. The rim point whose hand
    is clear of the neighbours, then the highest (a tilted bowl's raised side), then the nearest."""
    name, _ = pick_and_place_goal(state["goal"])
    pose, box = np.asarray(state["objects"][name], np.float64), np.asarray(state["boxes"][name], np.float64)
    if 2 * min(box[3], box[4]) <= MAX_GRASP or rotation(pose[3:])[2, 2] < 0.7:
        return None
    others = [_corners(state["objects"][o], state["boxes"][o]) for o in state["objects"] if o != name]

    def cost(angle: float) -> tuple[float, float, float]:
        point, axis = wall_point(pose, box, angle)
        blocked = _obstruction(point, float(np.arctan2(axis[1], axis[0])), others) > point[2] + HAND_ABOVE
        blocked |= _finger_rests(point, axis, others) > point[2] - FINGER_BELOW
        return (float(blocked), -round(float(point[2]), 2), float(np.linalg.norm(point[:2] - eef[:2])))

    return float(min(WALL_ANGLES, key=cost))


def wall_point(pose: np.ndarray, box: np.ndarray, angle: float) -> tuple[np.ndarray, np.ndarray]:
    """The end effector's grasp point on the wall at `angle` (in the object's frame, about its z),
    just below the rim, and the horizontal direction the fingers close along there (the radial one)."""
    pose, box = np.asarray(pose, np.float64), np.asarray(box, np.float64)
    radial = np.array([np.cos(angle), np.sin(angle), 0.0])
    radius = min(box[3], box[4]) - WALL_IN
    local = box[:3] + radius * radial + np.array([0.0, 0.0, box[5] - RIM_BELOW])
    axes = rotation(pose[3:])
    axis = axes @ radial
    axis[2] = 0.0
    return pose[:3] + axes @ local, axis / np.linalg.norm(axis)


def _finger_rests(point: np.ndarray, axis: np.ndarray, others: list[np.ndarray]) -> float:
    """The highest top of the other objects under the outer finger of a wall grasp at `point` (it
    goes down beside the object, below the rim, where a neighbour close by would stop it); -inf
    when none is under it."""
    out, across = np.linspace(*FINGER_SPAN[:2], 5), np.linspace(-FINGER_SPAN[2], FINGER_SPAN[2], 3)
    side = np.array([-axis[1], axis[0]])
    feet = point[:2] + out[:, None, None] * axis[:2] + across[None, :, None] * side
    top = -np.inf
    for corners in others:
        low, high = corners[:, :2].min(axis=0), corners[:, :2].max(axis=0)
        if np.all((feet >= low) & (feet <= high), axis=-1).any():
            top = max(top, float(corners[:, 2].max()))
    return top


def _obstruction(grasp: np.ndarray, angle: float, others: list[np.ndarray]) -> float:
    """The highest top of the other objects under the hand's footprint (fingers closing along
    `angle` at `grasp`); -inf when none is under it."""
    along = np.array([np.cos(angle), np.sin(angle)])
    across = np.array([-along[1], along[0]])
    top = -np.inf
    for corners in others:
        low, high = corners[:, :2].min(axis=0), corners[:, :2].max(axis=0)
        grid = np.stack(np.meshgrid(np.linspace(low[0], high[0], 5), np.linspace(low[1], high[1], 5)), -1)
        rel = grid.reshape(-1, 2) - grasp[:2]
        inside = (np.abs(rel @ along) < HAND_HALF[0]) & (np.abs(rel @ across) < HAND_HALF[1])
        if inside.any():
            top = max(top, float(corners[:, 2].max()))
    return top


def _yawed_to(quat: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """`quat` turned about the vertical so the fingers' closing axis (the gripper's y) lies along
    `axis`, the short way round (the two fingers are alike, so a half turn is the same grasp)."""
    finger = rotation(quat)[:, 1]
    angle = np.arctan2(axis[1], axis[0]) - np.arctan2(finger[1], finger[0])
    angle = (angle + np.pi / 2) % np.pi - np.pi / 2
    turn = np.array([0.0, 0.0, np.sin(angle / 2), np.cos(angle / 2)])
    return quat_mul(turn, quat)


def rotation(q: np.ndarray) -> np.ndarray:
    """The rotation matrix of quaternion `q` (xyzw)."""
    x, y, z, w = np.asarray(q, np.float64) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


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
