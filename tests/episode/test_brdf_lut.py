"""The renderer's BRDF table, computed once per sim env (harness.episode.bench.brdf_lut).

The point is speed (the renderer's own build of it costs a sim ~10 CPU-seconds on lavapipe:
benchmarks/node_throughput.py shows the start-up), so what is tested here is that it changes no
pixel of the benchmark, and that a missing, damaged or unwritable table never stops a sim.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.config.settings import Settings
from harness.episode.bench import brdf_lut
from harness.episode.bench.maniskill import ManiSkillBenchmark

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("own", "given")  # the renderer builds its own, or is given ours


def _render(table: str, out: str) -> None:
    """The benchmark's images in a fresh process (the renderer keeps the first table a process
    uses), with the renderer's own table or ours."""
    os.environ["SIM_ENV_CACHE"] = "0"  # every episode builds its env, and so its cameras
    if table == "own":
        brdf_lut.give_to = lambda sensors: None
    images = {}
    bench = ManiSkillBenchmark(Settings.from_env(os.environ))
    for task, level in (("PickCube", "clean"), ("PushCube", "clutter6")):
        episode = bench.make_episode(task, level, 3)
        images.update({f"{task}/{cam}": image for cam, image in episode.observe()["images"].items()})
        episode.close()
    np.savez(out, **images)


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    tmp = tmp_path_factory.mktemp("brdf")
    for table in TABLES:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, __file__, table, str(tmp / table)], env=env, check=True, timeout=600)
    return {table: dict(np.load(tmp / f"{table}.npz")) for table in TABLES}


def test_the_given_table_changes_no_pixel_of_the_benchmark(renders: dict[str, dict[str, np.ndarray]]) -> None:
    own, given = renders["own"], renders["given"]
    assert len(own) >= 2 and given.keys() == own.keys()
    for name in own:
        assert own[name].std() > 0, f"{name}: a blank image proves nothing"
        np.testing.assert_array_equal(given[name], own[name], err_msg=name)


def _stand_in(calls: list[int]) -> np.ndarray:
    calls.append(1)
    return np.full((brdf_lut.SIZE, brdf_lut.SIZE, 2), 0.5, np.float16)


def test_a_missing_table_is_computed_once_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(brdf_lut, "compute", lambda: _stand_in(calls))
    path = tmp_path / "share" / "harness" / "table.npy"
    first = brdf_lut.load_or_build(path)
    assert path.is_file() and calls == [1]
    np.testing.assert_array_equal(brdf_lut.load_or_build(path), first)
    assert calls == [1], "a kept table must not be computed again"
    assert list(path.parent.iterdir()) == [path], "no temporary file is left beside it"


@pytest.mark.parametrize("content", [b"not an array", None])
def test_a_damaged_table_is_computed_again_and_said(
    content: bytes | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(brdf_lut, "compute", lambda: _stand_in(calls))
    path = tmp_path / "table.npy"
    if content is None:
        np.save(path, np.zeros((4, 4), np.float32))  # an array, but not the table
    else:
        path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="brdf_lut"):
        table = brdf_lut.load_or_build(path)
    assert calls == [1] and table.shape == (brdf_lut.SIZE, brdf_lut.SIZE, 2)
    assert str(path) in caplog.text and "computing it again" in caplog.text
    assert np.load(path).shape == table.shape, "the damaged file is replaced"


def test_a_read_only_env_still_gets_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(brdf_lut, "compute", lambda: _stand_in(calls))
    blocker = tmp_path / "share"
    blocker.write_text("a file where the table's folder would go")
    path = blocker / "harness" / "table.npy"
    with caplog.at_level(logging.WARNING, logger="brdf_lut"):
        table = brdf_lut.load_or_build(path)
    assert calls == [1] and table.dtype == np.float16
    assert "cannot store the BRDF table" in caplog.text and str(path) in caplog.text


def test_the_hammersley_points_are_the_shaders() -> None:
    """radicalInverse_VdC(1) = 0.5, (2) = 0.25, (3) = 0.75: the bit reversal, not a copy of i."""
    xi_x, xi_y = brdf_lut._hammersley(8)
    np.testing.assert_array_equal(xi_x, np.arange(8, dtype=np.float32) / 8)
    np.testing.assert_array_equal(xi_y, [0, 0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875])


if __name__ == "__main__":
    _render(sys.argv[1], sys.argv[2])
