"""LIBERO's settled scenes, checked against a reference made on the pinned MuJoCo.

Why: an init state is a stored MuJoCo state, and a release of MuJoCo that integrates contacts
differently settles it into another scene. On MuJoCo 3.17 libero_spatial task 5's bowl slides off
its ramekin and three objects of libero_10 task 0 leave the frame, with no error anywhere (LeRobot
#4390; docs/benchmarks.md, "MuJoCo"). So every task of the five suites is set up exactly as an
episode is (`LiberoEpisode`: the same env, reset, init state and settle steps) and, after the settle
steps, each object the BDDL names is checked:
- against the reference (`REFERENCE`, written on the pinned stack by `scripts/check_libero_scenes.py
  --write`): its position within `POSITION_TOL` of the reference's; the whole MuJoCo state's digest
  says whether it is also bit-identical (a difference below the tolerance is reported, not refused:
  another CPU may round differently);
- on its own: it has not slid more than `SLIDE_TOL` sideways from where the init state put it, nor
  dropped more than `DROP_TOL` (an init state holds its objects a few cm above their supports, and the
  settle steps let them land: up to ~16 cm), so it has not fallen off or left the workspace; and it is
  at rest (speed under `SPEED_TOL`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.settings import Settings
from harness.episode.bench.libero_suite import (
    SETTLE_ACTION,
    SETTLE_STEPS,
    STEP_LIMITS,
    LiberoTask,
    init_states,
)

REFERENCE = Path(__file__).with_name("libero_scenes.json")
SUITES = tuple(STEP_LIMITS)  # all five
INIT_STATES_CHECKED = (0, 1, 2)
POSITION_TOL = 0.002  # m: rounding differences stay far below it; 3.17's broken scenes move cm to m
SLIDE_TOL = 0.03  # m sideways (xy) from the init state's position (pinned stack: <= 0.019 unmarked)
DROP_TOL = 0.25  # m down from the init state's position: a fall off its support (pinned: <= 0.163)
SPEED_TOL = 0.05  # m/s after the settle steps (the pinned stack: <= 0.023 unmarked)
DIGITS = 5  # positions are stored to 10 µm


@dataclass(frozen=True)
class Settled:
    """One (task, init state) after the settle steps."""

    positions: dict[str, list[float]]  # object (BDDL name) -> xyz, m
    slide: dict[str, float]  # object -> sideways (xy) distance from the init state's position, m
    drop: dict[str, float]  # object -> how far it went down from the init state's position, m
    speed: dict[str, float]  # object -> linear speed, m/s
    digest: str  # sha256 of the whole MuJoCo state (time, qpos, qvel, ...), bit for bit

    def reference(self) -> dict[str, Any]:
        """What the reference file keeps of it."""
        rounded = {name: [round(v, DIGITS) for v in xyz] for name, xyz in self.positions.items()}
        return {"positions": rounded, "digest": self.digest, "unsettled": sorted(unsettled(self))}


def settle(bench: Any, task: LiberoTask, seed: int) -> Settled:
    """Set up init state `seed` of `task` as an episode does, without rendering a frame."""
    from harness.episode.bench.libero import frames_skipped, reset_episode

    with frames_skipped():
        env = bench.env_for(task)
        reset_episode(env)
        env.set_init_state(init_states(task)[seed])
        inner = env.env
        start = _positions(inner)
        for _ in range(SETTLE_STEPS):
            env.step(list(SETTLE_ACTION))
    end = _positions(inner)
    state = env.sim.get_state().flatten()
    return Settled(
        positions={name: xyz.tolist() for name, xyz in end.items()},
        slide={name: float(np.linalg.norm(end[name][:2] - start[name][:2])) for name in end},
        drop={name: float(start[name][2] - end[name][2]) for name in end},
        speed=_speeds(inner),
        digest=hashlib.sha256(np.ascontiguousarray(state, np.float64).tobytes()).hexdigest(),
    )


def _positions(env: Any) -> dict[str, np.ndarray]:
    data = env.sim.data
    return {name: np.array(data.body_xpos[env.obj_body_id[name]]) for name in env.objects_dict}


def _speeds(env: Any) -> dict[str, float]:
    import mujoco

    model, data = env.sim.model._model, env.sim.data._data
    velocity = np.zeros(6)
    speeds = {}
    for name in env.objects_dict:
        mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_BODY, env.obj_body_id[name], velocity, 0)
        speeds[name] = float(np.linalg.norm(velocity[3:]))
    return speeds


def unsettled(settled: Settled) -> dict[str, list[str]]:
    """The scene's own faults, whatever the reference says: object -> what is wrong with it."""
    faults: dict[str, list[str]] = {}
    for name in settled.positions:
        if settled.slide[name] > SLIDE_TOL:
            faults.setdefault(name, []).append(f"slid {settled.slide[name] * 100:.1f} cm from its init state")
        if settled.drop[name] > DROP_TOL:
            faults.setdefault(name, []).append(f"fell {settled.drop[name] * 100:.1f} cm from its init state")
        if settled.speed[name] > SPEED_TOL:
            faults.setdefault(name, []).append(f"still moving at {settled.speed[name]:.2f} m/s")
    return faults


def problems(settled: Settled, reference: dict[str, Any] | None) -> list[str]:
    """What is wrong with a settled scene, one line each; empty when it is as the reference's.

    An object the reference knows unsettled (LIBERO's own init states leave a few objects sliding
    even on the pinned stack: docs/benchmarks.md) passes if it is where the reference has it."""
    known = set((reference or {}).get("unsettled", ()))
    lines = [f"{name} {fault}" for name, faults in unsettled(settled).items() if name not in known
             for fault in faults]  # fmt: skip
    if reference is None:
        return lines
    for name, xyz in settled.positions.items():
        want = reference["positions"].get(name)
        if want is None:
            lines.append(f"{name} is not in the reference")
        elif (gap := float(np.max(np.abs(np.asarray(xyz) - want)))) > POSITION_TOL:
            lines.append(f"{name} {gap * 100:.1f} cm from the reference's position")
    return lines + [f"{name} is missing" for name in reference["positions"] if name not in settled.positions]


def max_gap(settled: Settled, reference: dict[str, Any]) -> float:
    """The largest difference (m, per coordinate) of any object's position from the reference's."""
    gaps = [
        float(np.max(np.abs(np.asarray(xyz) - reference["positions"][name])))
        for name, xyz in settled.positions.items()
        if name in reference["positions"]
    ]
    return max(gaps, default=0.0)


def load_reference(path: Path = REFERENCE) -> dict[str, Any]:
    """{"stack": {...}, "scenes": {"<suite>/<task index>/<init state>": {...}}}."""
    return json.loads(path.read_text())


def scene_key(task: LiberoTask, seed: int) -> str:
    return f"{task.suite}/{task.index}/{seed}"


@dataclass(frozen=True)
class Checked:
    """One (task, init state) checked: its key, task, what was settled and what is wrong."""

    key: str
    task: str
    settled: Settled
    problems: list[str]
    gap: float | None  # max_gap against the reference, m; None without one


def check_tasks(
    settings: Settings,
    suite: str,
    indices: list[int],
    seeds: tuple[int, ...],
    reference: dict[str, Any] | None,
) -> list[Checked]:
    """Tasks `indices` of `suite` at init states `seeds`, in this process (one env at a time), on
    LIBERO as `settings` configure it."""
    from harness.episode.bench.libero import LiberoBenchmark
    from harness.episode.bench.libero_suite import suite_tasks

    bench = LiberoBenchmark(settings)
    scenes = (reference or {}).get("scenes", {})
    checked = []
    try:
        tasks = list(suite_tasks(suite).values())
        for task in (tasks[i] for i in indices):
            for seed in seeds:
                key = scene_key(task, seed)
                settled = settle(bench, task, seed)
                want = scenes.get(key)
                found = problems(settled, want)
                if reference is not None and want is None:
                    found.append(f"{key} is not in the reference")
                gap = max_gap(settled, want) if want is not None else None
                checked.append(Checked(key, task.name, settled, found, gap))
    finally:
        bench.close_env()
    return checked
