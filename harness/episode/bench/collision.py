"""Collision detection for HSR ("hard" success = success and no collision).

Definition (README, "HSR: hard success"): an episode *collided* when, in any physics substep, a robot
link touched the table, the ground, a distractor object or another robot link with an impulse above
`collision_impulse` (N·s summed over the contact points of that pair in that substep). Contacts with
the task's own objects (cube, peg, tool, bin, ...) are manipulation, not collision, and the two gripper
fingers touching each other (a gripper closed on nothing) are not a self-collision. Contacts come from
PhysX after every substep, so a brief hit between control steps is not missed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

FINGER_MARK = "finger"  # panda_leftfinger(_pad), panda_rightfinger(_pad)


@dataclass
class ContactMonitor:
    robot: frozenset[str]  # entity names of robot links
    forbidden: frozenset[str]  # entity names of table, ground, distractors
    threshold: float
    first: str | None = None  # "<a> ~ <b> impulse=<x>" of the first collision, for the record's log
    max_impulse: float = 0.0  # largest forbidden-pair impulse seen, collided or not

    @property
    def collided(self) -> bool:
        return self.first is not None

    def observe(self, contacts: Iterable[Any]) -> None:
        """Feed one substep's `scene.px.get_contacts()`."""
        for contact in contacts:
            a, b = contact.bodies[0].entity.name, contact.bodies[1].entity.name
            if not self._forbidden_pair(a, b):
                continue
            impulse = float(sum(np.linalg.norm(point.impulse) for point in contact.points))
            self.max_impulse = max(self.max_impulse, impulse)
            if impulse > self.threshold and self.first is None:
                self.first = f"{a} ~ {b} impulse={impulse:.4f}"

    def _forbidden_pair(self, a: str, b: str) -> bool:
        a_robot, b_robot = a in self.robot, b in self.robot
        if a_robot and b_robot:
            return not (FINGER_MARK in a and FINGER_MARK in b)
        return (a_robot and b in self.forbidden) or (b_robot and a in self.forbidden)
