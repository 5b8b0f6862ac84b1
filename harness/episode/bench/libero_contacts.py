"""Collisions on LIBERO from MuJoCo's contact list, for HSR (hard success = success and no collision).

Definition: an episode *collided* when, in any physics substep after the settle steps, a robot link
(a body named `robot<n>_...` or `gripper<n>_...`, robosuite's prefixes) touched a body that is not
one of the task's objects with a contact force above `COLLISION_FORCE_N` (newtons, the norm of the
force part of `mj_contactForce`, summed over the contact points of that pair of bodies in that
substep). The task's objects are the BDDL's `obj_of_interest` and the objects its goal names (a
region counts as the object it belongs to, `basket_1_contain_region` as `basket_1`): touching them is
manipulation. Everything else is forbidden: the other objects, the fixtures (table, cabinets,
stove), the floor and the world's geoms. The robot's mount (`mount<n>_`) stands on the floor and is
no link. Contacts are read after every MuJoCo substep (robosuite runs 25 a control step), by
wrapping the episode's `sim.step`, so a hit between two control steps is not missed.

Why 2 N: measured with `policy/libero_oracle` on libero_object, init states 0-4 (images at 32 px;
the physics is the same). Tasks 0-4 (alphabet soup, cream cheese, salad dressing, bbq sauce,
ketchup), 25 episodes: its 23 successful pick-and-places never touched a forbidden body (peak 0.0
N); its two failures (cream cheese, init states 1 and 3, the hand lands on the tomato sauce) peak at
225-227 N. The fingers pushed down on the nearest non-target object
(tests/episode/test_libero_hsr.py's shove) peak at 100-400 N. A resting object weighs 0.1-0.4 N, so
2 N lets a brush pass and is fifty times below the weakest shove. Not every oracle success is clean:
on task 5 (tomato sauce) init states 0 and 1 its hand presses the orange juice at 93 N while it
grasps; that is a real hit, no threshold could pass it and still catch a 100 N shove, and it counts
(a soft success).
See docs/benchmarks.md (LIBERO, HSR).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

COLLISION_FORCE_N = 2.0  # see the module docstring: above a graze, far below a shove
ROBOT_BODY = re.compile(r"^(robot|gripper)\d+_")
MOUNT_BODY = re.compile(r"^mount\d+_")
ROBOT, TARGET, FORBIDDEN, IGNORED = 0, 1, 2, 3  # what a body is to the monitor


@dataclass
class MujocoContactMonitor:
    """Watches one episode's MuJoCo sim; `first` names the first collision, `max_force_n` is the
    largest robot-vs-forbidden force seen (collided or not), for measuring the threshold."""

    kinds: np.ndarray  # per body: ROBOT, TARGET, FORBIDDEN or IGNORED
    names: list[str]  # per body
    threshold_n: float = COLLISION_FORCE_N
    first: str | None = None  # "<link> ~ <body> force=<x>N" of the first collision
    max_force_n: float = 0.0
    _force: np.ndarray = field(default_factory=lambda: np.zeros(6))

    @property
    def collided(self) -> bool:
        return self.first is not None

    def observe(self, model: Any, data: Any) -> None:
        """Feed one substep's contacts (`data.contact` after `mj_step`)."""
        import mujoco

        n = int(data.ncon)
        if not n:
            return
        bodies = model.geom_bodyid
        b1, b2 = bodies[data.contact.geom1[:n]], bodies[data.contact.geom2[:n]]
        k1, k2 = self.kinds[b1], self.kinds[b2]
        hits = np.flatnonzero(((k1 == ROBOT) & (k2 == FORBIDDEN)) | ((k1 == FORBIDDEN) & (k2 == ROBOT)))
        if not hits.size:
            return
        per_pair: dict[tuple[int, int], float] = {}
        for i in hits:
            mujoco.mj_contactForce(model, data, int(i), self._force)
            pair = (int(b1[i]), int(b2[i])) if k1[i] == ROBOT else (int(b2[i]), int(b1[i]))
            per_pair[pair] = per_pair.get(pair, 0.0) + float(np.linalg.norm(self._force[:3]))
        for (link, other), force in per_pair.items():
            self.max_force_n = max(self.max_force_n, force)
            if force > self.threshold_n and self.first is None:
                self.first = f"{self.names[link]} ~ {self.names[other]} force={force:.2f}N"

    def attach(self, sim: Any) -> None:
        """Observe after every substep of `sim` (robosuite's MjSim): its `step` is wrapped on the
        instance, calling the class's own, so attaching again (a reused sim) never wraps twice."""
        model, data, step = sim.model._model, sim.data._data, type(sim).step

        def step_and_observe(*args: Any, **kwargs: Any) -> None:
            step(sim, *args, **kwargs)
            self.observe(model, data)

        sim.step = step_and_observe


def task_objects(env: Any) -> set[str]:
    """The objects an episode may touch: `obj_of_interest` and the goal's arguments, a region
    mapped to the object whose name starts it (the longest such)."""
    goal_args = [arg for predicate in env.parsed_problem["goal_state"] for arg in predicate[1:]]
    names = [*env.obj_of_interest, *goal_args]
    objects = set(env.objects_dict) | set(env.fixtures_dict)
    found = set()
    for name in map(str, names):
        owner = max((o for o in objects if name == o or name.startswith(f"{o}_")), key=len, default=None)
        if owner is not None:
            found.add(owner)
    return found


def monitor_for(env: Any, threshold_n: float = COLLISION_FORCE_N) -> MujocoContactMonitor:
    """A monitor of `env` (LIBERO's robosuite env, `OffScreenRenderEnv(...).env`) with every body
    classified, attached to its current sim."""
    model = env.sim.model._model
    names = [model.body(b).name for b in range(model.nbody)]
    targets = {env.obj_body_id[name] for name in task_objects(env)}
    kinds = np.array([_kind(b, names[b], targets, model.body_rootid) for b in range(model.nbody)])
    monitor = MujocoContactMonitor(kinds, names, threshold_n)
    monitor.attach(env.sim)
    return monitor


def _kind(body: int, name: str, targets: Iterable[int], roots: np.ndarray) -> int:
    if ROBOT_BODY.match(name):
        return ROBOT
    if MOUNT_BODY.match(name):
        return IGNORED
    return TARGET if int(roots[body]) in set(targets) else FORBIDDEN
