"""MetaWorld's scripted experts recorded as a local LeRobotDataset: run in the LeRobot env.

Why through LeRobot's own env: a policy trained on these frames is evaluated by LeRobot's
`MetaworldEnv` (corner2 camera, flipped 480x480 frames, `agent_pos` = the hand's xyz + gripper), so
the demonstrations are exactly what its `reset(seed)`/`step` return, with `honor_seeds()` making
episode `s` the variation our benchmark draws for seed `s`. The expert reads MetaWorld's raw
39-number observation of the same step, kept as the inner env returned it (re-reading `_get_obs()`
after a step would refresh its previous-frame half).

Training seeds start at `FIRST_TRAINING_SEED`: eval pools use seeds 0..EVAL_TEST_NUM-1 (or a seed
bank's seeds), and `check_training_seeds` refuses any training seed that an eval could draw.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.rundir import task_config_name
from harness.config.seedbank import read_bank_file
from harness.pathnames import path_part

FIRST_TRAINING_SEED = 1_000_000
SCENE = "metaworld"  # the scene field of MetaWorld's queue lines (seeds/metaworld/MT10.txt)
REPO_ID = "local/metaworld-experts"
FPS = 80
SIDE = 480
FEATURES = {
    "observation.image": {
        "dtype": "image",
        "shape": (SIDE, SIDE, 3),
        "names": ["height", "width", "channel"],
    },
    "observation.state": {"dtype": "float32", "shape": (4,), "names": None},
    "action": {"dtype": "float32", "shape": (4,), "names": None},
}


class EvalSeedOverlap(ValueError):
    """A training seed an eval could draw; the message names the seed."""


def bank_seeds(seeds_root: Path, task: str) -> dict[Path, set[int]]:
    """Every MetaWorld seed bank file for `task` under `seeds_root` (`<task>/metaworld_<config>.txt`,
    as harness/config/seedbank.py lays them out) and its seeds."""
    folder = seeds_root / path_part(task)
    prefix = task_config_name(SCENE, "")  # `metaworld_`: any BENCH_CONFIG
    return {path: set(read_bank_file(path)) for path in sorted(folder.glob(f"{prefix}*.txt"))}


def check_training_seeds(tasks: Iterable[str], seeds: Iterable[int], seeds_root: Path) -> None:
    """Raise EvalSeedOverlap naming the first seed below FIRST_TRAINING_SEED (eval pools use 0..N-1)
    or found in a task's MetaWorld seed bank."""
    seeds = list(seeds)
    for seed in seeds:
        if seed < FIRST_TRAINING_SEED:
            raise EvalSeedOverlap(
                f"training seed {seed} is below {FIRST_TRAINING_SEED:_}: eval pools draw seeds "
                f"0..EVAL_TEST_NUM-1 (USE_EVAL_SEEDS=0); training seeds must start at {FIRST_TRAINING_SEED:_}"
            )
    for task in tasks:
        for path, bank in bank_seeds(seeds_root, task).items():
            for seed in seeds:
                if seed in bank:
                    raise EvalSeedOverlap(f"training seed {seed} of {task} is in the eval seed bank {path}")


@dataclass(frozen=True)
class Episode:
    task: str
    seed: int
    frames: list[dict[str, Any]]  # observation.image, observation.state, action
    success: bool


def expert_episode(env: Any, seed: int) -> Episode:
    """One expert episode through LeRobot's `MetaworldEnv` (honor_seeds applied), up to and
    including the step that succeeds; `success` False if it ran out of steps first."""
    raw: dict[str, np.ndarray] = {}
    format_obs = env._format_raw_obs

    def keep_raw(raw_obs: np.ndarray) -> Any:
        raw["obs"] = raw_obs
        return format_obs(raw_obs)

    env._format_raw_obs = keep_raw  # the inner env's obs of each reset/step, before LeRobot formats it
    try:
        obs, _ = env.reset(seed=seed)
        frames = []
        for _ in range(env._max_episode_steps):
            action = np.clip(env.expert_policy.get_action(raw["obs"]), -1.0, 1.0).astype(np.float32)
            frames.append(
                {
                    "observation.image": obs["pixels"],
                    "observation.state": np.asarray(obs["agent_pos"], dtype=np.float32),
                    "action": action,
                }
            )
            obs, _, terminated, truncated, info = env.step(action)
            if info["is_success"]:
                return Episode(env.task, seed, frames, True)
            if terminated or truncated:
                break
        return Episode(env.task, seed, frames, False)
    finally:
        env._format_raw_obs = format_obs


def expert_episodes(task: str, seeds: Iterable[int]) -> Iterator[Episode]:
    from lerobot.envs.metaworld import MetaworldEnv

    from policy.lerobot.seeded_metaworld import honor_seeds

    honor_seeds()
    env = MetaworldEnv(task, obs_type="pixels_agent_pos")
    try:
        for seed in seeds:
            yield expert_episode(env, seed)
    finally:
        env.close()


@dataclass(frozen=True)
class Recorded:
    root: Path
    episodes: dict[str, list[int]]  # task -> seeds kept
    dropped: dict[str, list[int]]  # task -> seeds whose expert failed
    frames: int


def record(
    root: Path,
    tasks: list[str],
    episodes: int,
    first_seed: int = FIRST_TRAINING_SEED,
    seeds_root: Path | None = None,
) -> Recorded:
    """Record `episodes` successful expert episodes per task (seeds first_seed, first_seed+1, ...,
    skipping failures) into a new LeRobotDataset at `root`."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.envs.metaworld import TASK_DESCRIPTIONS

    seeds_root = seeds_root if seeds_root is not None else Path(__file__).resolve().parents[1] / "seeds"
    dataset = LeRobotDataset.create(
        repo_id=REPO_ID, root=root, fps=FPS, features=FEATURES, use_videos=False, image_writer_threads=2
    )
    kept: dict[str, list[int]] = {task: [] for task in tasks}
    dropped: dict[str, list[int]] = {task: [] for task in tasks}
    frames, start = 0, time.monotonic()
    for task in tasks:
        for episode in expert_episodes(task, _checked_seeds(task, first_seed, seeds_root)):
            if not episode.success:
                dropped[task].append(episode.seed)
            else:
                for frame in episode.frames:
                    dataset.add_frame({**frame, "task": TASK_DESCRIPTIONS[task]})
                dataset.save_episode()
                kept[task].append(episode.seed)
                frames += len(episode.frames)
            done = sum(map(len, kept.values()))
            outcome = "ok" if episode.success else "expert failed, dropped"
            print(
                f"[demos] {task} seed {episode.seed}: {outcome} "
                f"({len(episode.frames)} steps) | {done}/{episodes * len(tasks)} episodes, {frames} frames, "
                f"{time.monotonic() - start:.0f}s",
                file=sys.stderr,
                flush=True,
            )
            if len(kept[task]) == episodes:
                break
            if len(dropped[task]) > episodes:
                raise RuntimeError(f"{task}: the expert failed on {len(dropped[task])} seeds {dropped[task]}")
    dataset.finalize()
    return Recorded(Path(root), kept, dropped, frames)


def _checked_seeds(task: str, first: int, seeds_root: Path) -> Iterator[int]:
    """first, first+1, ...: each checked against the eval seeds before it is used."""
    seed = first
    while True:
        check_training_seeds([task], [seed], seeds_root)
        yield seed
        seed += 1
