"""Building ManiSkill3 envs for the benchmark: clutter, camera/light perturbation, contact monitoring.

Each task class is subclassed once (cached) with three additions, all driven by the episode seed so the
same (task, config, seed) builds the same scene in any process: N collidable distractor boxes placed
away from the task objects, a per-seed jitter of the sensor cameras and light intensity, and a
`ContactMonitor` fed after every physics substep (HSR). Every episode starts from a freshly built
scene: a new env, or a kept one rebuilt by `reset(reconfigure=True)` (`maniskill_cache`; a plain
reset of a used env drifts: replayed actions diverge in about half the seeds), so all of this is
built again from the episode's seed. One render system is held for the life of the process, and
every camera is given the renderer's BRDF table (`brdf_lut`), so no env pays the renderer's own
~10 CPU-second build of it.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

import numpy as np

from harness.episode.bench import brdf_lut
from harness.episode.bench.collision import ContactMonitor
from harness.episode.bench.maniskill_config import LevelSpec, TaskSpec

_RENDER_SYSTEM: Any = None
_PLACE_MIN_DIST_TASK = 0.12  # m between a distractor and any task object or goal
_PLACE_MIN_DIST_OTHER = 0.07  # m between two distractors
_PLACE_X = (-0.25, 0.25)
_PLACE_Y = (-0.35, 0.35)
_PALETTE = [
    (0.9, 0.6, 0.1),
    (0.5, 0.2, 0.7),
    (0.1, 0.6, 0.6),
    (0.8, 0.8, 0.2),
    (0.4, 0.4, 0.4),
    (0.9, 0.4, 0.6),
]


def hold_render_system() -> None:
    """Create the process-wide CPU render system once, so later envs skip the shader start-up."""
    global _RENDER_SYSTEM
    if _RENDER_SYSTEM is None:
        import sapien

        _RENDER_SYSTEM = sapien.render.RenderSystem(sapien.Device("cpu"))


def configure_ray_tracing(shader: str, spp: int, denoiser: str) -> None:
    """Apply RT_SPP / DENOISER; they only matter for the ray-traced shader packs (`rt*`)."""
    if not shader.startswith("rt"):
        return
    import sapien

    sapien.render.set_ray_tracing_samples_per_pixel(spp)
    sapien.render.set_ray_tracing_denoiser(denoiser)


def make_env(
    task: TaskSpec,
    level: LevelSpec,
    seed: int,
    *,
    threshold: float,
    obs_mode: str,
    control_mode: str,
    render: bool,
    image_size: int = 128,
    shader: str = "minimal",
) -> Any:
    """A fresh, not yet reset env of `task` at `level`; call `env.reset(seed=seed)` next."""
    from mani_skill import logger
    from mani_skill.utils.registration import REGISTERED_ENVS

    logger.setLevel(logging.ERROR)  # per-episode "no initial pose" builder warnings flood the logs
    if task.env_id not in REGISTERED_ENVS:
        raise KeyError(f"ManiSkill has no env {task.env_id!r} (task {task.name})")
    if render:
        hold_render_system()
    cls = _benchmark_class(REGISTERED_ENVS[task.env_id].cls)
    kwargs = dict(REGISTERED_ENVS[task.env_id].default_kwargs)
    kwargs.update(
        obs_mode=obs_mode,
        control_mode=control_mode,
        sim_backend="physx_cpu",
        render_backend="cpu" if render else "none",
        num_envs=1,
        robot_uids=task.robot,
        sensor_configs=dict(width=image_size, height=image_size, shader_pack=shader),
    )
    return cls(bench_level=level, bench_seed=seed, bench_threshold=threshold, **kwargs)


@cache
def _benchmark_class(task_cls: type) -> type:
    from mani_skill.utils.building import actors
    from mani_skill.utils.scene_builder.table import TableSceneBuilder
    from mani_skill.utils.structs import Pose

    class BenchmarkEnv(task_cls):
        def __init__(self, *args: Any, bench_level: LevelSpec, bench_seed: int, bench_threshold: float, **kw):
            self.bench_level = bench_level
            self.bench_seed = int(bench_seed)
            self.bench_threshold = bench_threshold
            self.distractors: list[Any] = []
            self.contact_monitor: ContactMonitor | None = None
            super().__init__(*args, **kw)

        def bench_rng(self, purpose: int) -> np.random.Generator:
            """A fresh generator per purpose, so each draw depends only on (seed, purpose)."""
            return np.random.default_rng([self.bench_seed, 20250501, purpose])

        @property
        def _default_sensor_configs(self):
            configs = super()._default_sensor_configs
            level = self.bench_level
            if level.camera_jitter_m == 0 and level.camera_jitter_deg == 0:
                return configs
            rng = self.bench_rng(1)
            for config in configs if isinstance(configs, list | tuple) else [configs]:
                shift = rng.uniform(-1, 1, 3) * level.camera_jitter_m
                angles = np.deg2rad(rng.uniform(-1, 1, 3) * level.camera_jitter_deg)
                config.pose = config.pose * Pose.create_from_pq(p=shift, q=quat_from_euler_xyz(angles))
            return configs

        def _setup_sensors(self, options: dict) -> None:
            super()._setup_sensors(options)
            if self.backend.render_device is not None:  # before any camera's first picture
                brdf_lut.give_to([*self._sensors.values(), *self._human_render_cameras.values()])

        def _load_lighting(self, options: dict) -> None:
            low, high = self.bench_level.light_scale
            if low == high == 1.0:
                return super()._load_lighting(options)
            scale = float(self.bench_rng(2).uniform(low, high))
            self.scene.set_ambient_light([0.3 * scale] * 3)
            self.scene.add_directional_light(
                [1, 1, -1], [scale] * 3, shadow=self.enable_shadow, shadow_scale=5, shadow_map_size=2048
            )
            self.scene.add_directional_light([0, 0, -1], [scale] * 3)

        def _load_scene(self, options: dict) -> None:
            super()._load_scene(options)
            self.distractors = []  # a reconfigure (a cached env's next seed) builds them anew
            rng = self.bench_rng(3)
            for index in range(self.bench_level.distractors):
                half = rng.uniform(0.012, 0.03, 3)
                color = [*_PALETTE[index % len(_PALETTE)], 1.0]
                self.distractors.append(
                    actors.build_box(
                        self.scene, half.tolist(), color, name=f"distractor_{index}",
                        initial_pose=Pose.create_from_pq(p=[0.3 + index, 1.0, half[2]]),
                    )
                )  # fmt: skip
            builder = next(v for v in vars(self).values() if isinstance(v, TableSceneBuilder))
            agents = self.agent.agents if hasattr(self.agent, "agents") else [self.agent]
            robot = frozenset(link._objs[0].entity.name for a in agents for link in a.robot.links)
            fixed = [*builder.scene_objects, *self.distractors]
            forbidden = frozenset(obj.name for actor in fixed for obj in actor._objs)
            self.contact_monitor = ContactMonitor(robot, forbidden, self.bench_threshold)

        def _initialize_episode(self, env_idx: Any, options: dict) -> None:
            super()._initialize_episode(env_idx, options)
            if self.distractors:
                self._place_distractors()

        def _place_distractors(self) -> None:
            ours = {d.name for d in self.distractors} | {"table-workspace", "ground"}
            taken = [a.pose.p[0, :2].cpu().numpy() for n, a in self.scene.actors.items() if n not in ours]
            placed: list[np.ndarray] = []
            rng = self.bench_rng(4)
            for actor in self.distractors:
                xy = _sample_free_xy(rng, taken, placed)
                placed.append(xy)
                height = float(actor.pose.p[0, 2])
                yaw = float(rng.uniform(-np.pi, np.pi))
                actor.set_pose(Pose.create_from_pq(p=[*xy, height], q=quat_from_euler_xyz([0.0, 0.0, yaw])))

        def _after_simulation_step(self) -> None:
            super()._after_simulation_step()
            if self.contact_monitor is not None:
                self.contact_monitor.observe(self.scene.px.get_contacts())

    BenchmarkEnv.__name__ = f"Bench{task_cls.__name__}"
    return BenchmarkEnv


def _sample_free_xy(
    rng: np.random.Generator, taken: list[np.ndarray], placed: list[np.ndarray]
) -> np.ndarray:
    for _ in range(1000):
        xy = np.array([rng.uniform(*_PLACE_X), rng.uniform(*_PLACE_Y)])
        if all(np.linalg.norm(xy - t) >= _PLACE_MIN_DIST_TASK for t in taken) and all(
            np.linalg.norm(xy - p) >= _PLACE_MIN_DIST_OTHER for p in placed
        ):
            return xy
    raise RuntimeError("no free table spot for a distractor (too many distractors for this task)")


def matrix_from_quat_wxyz(quat: Any) -> np.ndarray:
    """Unit quaternion (w, x, y, z), SAPIEN's order → 3×3 rotation matrix."""
    q = np.asarray(quat, dtype=np.float64)
    w, x, y, z = q / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def quat_from_euler_xyz(angles: Any) -> list[float]:
    """XYZ Euler (R = Rx Ry Rz, ManiSkill's convention) → quaternion (w, x, y, z)."""
    a, b, c = (float(v) / 2 for v in angles)
    ca, sa, cb, sb, cc, sc = np.cos(a), np.sin(a), np.cos(b), np.sin(b), np.cos(c), np.sin(c)
    return [
        ca * cb * cc - sa * sb * sc,
        sa * cb * cc + ca * sb * sc,
        ca * sb * cc - sa * cb * sc,
        ca * cb * sc + sa * sb * cc,
    ]
