"""SIM_ENV_CACHE: a built env reused for a later seed runs that seed's episode exactly as a fresh one."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from harness.config.settings import Settings
from harness.episode.bench import load_benchmark
from harness.episode.bench.maniskill_cache import EnvCache

BANK = Path(__file__).resolve().parents[2] / "seeds" / "maniskill"


def _trace(task: str, seed: int, config: str = "clean") -> np.ndarray:
    with np.load(BANK / task / f"table_{config}.traces.npz") as npz:
        return npz[f"seed{seed}"]


def _states(bench, task: str, config: str, seed: int, render: bool = False) -> np.ndarray:
    """The simulator state after every replayed action (and the last frame when rendering)."""
    episode = bench.make_episode(task, config, seed, render=render)
    try:
        states = [episode.state()]
        for action in _trace(task, seed, config):
            episode.apply(action)
            states.append(episode.state())
        if render:
            return np.array(states), episode.observe()["images"]
        return np.array(states)
    finally:
        episode.close()


def _bench(monkeypatch: pytest.MonkeyPatch, size: str):
    monkeypatch.setenv("SIM_ENV_CACHE", size)
    return load_benchmark("maniskill", Settings.from_env(os.environ))


@pytest.mark.sim
@pytest.mark.parametrize(
    ("task", "config"), [("PickCube", "clean"), ("StackCube", "clean"), ("PickCube", "clutter3")]
)
def test_a_reused_env_runs_the_same_episode_as_a_fresh_one(monkeypatch, task: str, config: str) -> None:
    """Each seed's whole state trajectory, bit for bit, after the env ran other seeds (grasps, a
    cube left stacked or in the air: a plain reset drifts from there); clutter3's distractors are
    sized by the seed, so they are rebuilt too."""
    seeds = [1, 2, 4]
    fresh = _bench(monkeypatch, "0")
    expected = {seed: _states(fresh, task, config, seed) for seed in seeds}
    assert fresh.envs.reused == 0 and len(fresh.envs) == 0
    cached = _bench(monkeypatch, "2")
    _states(cached, task, config, 0)
    for seed in seeds:
        states = _states(cached, task, config, seed)
        np.testing.assert_array_equal(states, expected[seed], err_msg=f"seed {seed}")
    assert cached.envs.reused == len(seeds) and len(cached.envs) == 1


@pytest.mark.sim
def test_a_reused_env_renders_what_a_fresh_one_does(monkeypatch) -> None:
    fresh_states, fresh_images = _states(_bench(monkeypatch, "0"), "PickCube", "clean", 2, render=True)
    cached = _bench(monkeypatch, "1")
    _states(cached, "PickCube", "clean", 1, render=True)
    states, images = _states(cached, "PickCube", "clean", 2, render=True)
    assert cached.envs.reused == 1
    np.testing.assert_array_equal(states, fresh_states)
    for camera, image in fresh_images.items():
        np.testing.assert_array_equal(images[camera], image, err_msg=camera)


@pytest.mark.sim
def test_warm_up_renders_once_and_keeps_the_env_for_the_first_episode(monkeypatch) -> None:
    bench = _bench(monkeypatch, "2")
    monkeypatch.setenv("BENCH_CONFIG", "clean")
    bench.warm_up()
    assert len(bench.envs) == 1
    bench.make_episode(bench.tasks()[0], "clean", 5).close()
    assert bench.envs.reused == 1


@pytest.mark.sim
def test_an_env_whose_step_failed_is_not_kept(monkeypatch) -> None:
    bench = _bench(monkeypatch, "2")
    episode = bench.make_episode("PickCube", "clean", 0, render=False)

    def broken_step(action):
        raise RuntimeError("physx gave up")

    monkeypatch.setattr(episode.env, "step", broken_step)
    with pytest.raises(RuntimeError, match="physx"):
        episode.apply(_trace("PickCube", 0)[0])
    episode.close()
    assert len(bench.envs) == 0


class _Env:
    def __init__(self, name: str, closed: list[str]) -> None:
        self.name, self.closed = name, closed

    def close(self) -> None:
        self.closed.append(self.name)


def test_cache_keeps_its_capacity_and_closes_the_least_recently_used() -> None:
    closed: list[str] = []
    cache = EnvCache(2)
    for key in ("a", "b", "c"):
        cache.give(key, _Env(key, closed))
    assert closed == ["a"] and len(cache) == 2
    assert cache.take("a") is None
    env_b = cache.take("b")
    assert env_b is not None and env_b.name == "b" and cache.reused == 1
    cache.give("b", env_b)
    cache.give("d", _Env("d", closed))  # c is now the least recently used
    assert closed == ["a", "c"]
    off = EnvCache(0)
    off.give("x", _Env("x", closed))
    assert closed[-1] == "x" and len(off) == 0


@pytest.mark.parametrize("value", ["-1", "65", "two", "1.5", ""])
def test_env_cache_knob_out_of_range_is_a_clear_error(value: str) -> None:
    with pytest.raises(ValueError, match=r"knob SIM_ENV_CACHE=.*0\.\.64"):
        Settings.from_env({"SIM_ENV_CACHE": value})


@pytest.mark.sim
def test_a_scene_drawn_at_build_depends_on_the_seed_only(monkeypatch) -> None:
    """A task that randomises while its scene is built (torch draws in `_load_scene`: ManiSkill seeds
    them from the seed of the reset that reconfigures) builds the same scene for a seed whether its
    env is fresh or was kept from another seed: a fresh env is built under the episode's seed too,
    not under ManiSkill's construction seed."""
    import torch
    from mani_skill.envs.tasks import PickCubeEnv

    drawn: list[float] = []
    original = PickCubeEnv._after_reconfigure

    def after_reconfigure(self, options):  # the torch RNG is still the one reconfigure seeded
        drawn.append(float(torch.rand(1)))
        return original(self, options)

    monkeypatch.setattr(PickCubeEnv, "_after_reconfigure", after_reconfigure)
    _bench(monkeypatch, "0").make_episode("PickCube", "clean", 3, render=False).close()
    fresh = drawn[-1]
    cached = _bench(monkeypatch, "1")
    cached.make_episode("PickCube", "clean", 0, render=False).close()
    cached.make_episode("PickCube", "clean", 3, render=False).close()
    assert cached.envs.reused == 1
    assert drawn[-1] == fresh
