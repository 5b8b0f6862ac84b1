"""The renderer's BRDF lookup table, computed once per sim env instead of once per sim process.

Why: SAPIEN's rasterizing shader packs sample a 512 x 512 table of the split-sum specular BRDF,
which the renderer builds with a compute shader at the first picture of every process (svulkan2's
`getDefaultBRDFLUT`, `shader_internal/brdf_lut.comp`: one invocation per texel, 1024 samples
each). On lavapipe that costs about 10 CPU-seconds (5 s of wall time on 2 threads): most of a sim's
start-up, paid again by every sim process of every worker. The renderer uses a table it is given
instead (a camera texture named BRDFLUT), so this module computes the same table from the same
formula in float32 with numpy, keeps it in the sim env (`scripts/setup.sh` builds it; a sim that
finds none builds it once and stores it), and hands it to each camera before its first picture.
The benchmark's images are byte-identical either way (tests/episode/test_brdf_lut.py).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from harness.process.failures import run_command

SIZE = 512  # texels a side, as svulkan2 builds it (it ignores the size it is asked for)
SAMPLES = 1024  # importance samples per texel, as in brdf_lut.comp
TEXTURE_NAME = "BRDFLUT"  # the shader binding `samplerBRDFLUT` the renderer fills from this name
FORMAT = "R16G16Sfloat"  # the renderer's own table: rg16f

log = logging.getLogger("brdf_lut")


def compute(size: int = SIZE, samples: int = SAMPLES) -> np.ndarray:
    """The table, float16 [dotNV, roughness, (scale, bias)], texel by texel as `brdf_lut.comp`
    computes it in float32: x is the roughness, y the cosine of the view angle, each at its
    texel's centre; the samples are summed in the shader's order.

    The shader's normal is +z, so its tangent frame is fixed: TangentX = (0, -1, 0), TangentY =
    (1, 0, 0), and the half vector H = (sinθ sinφ, -sinθ cosφ, cosθ).
    """
    f = np.float32
    centres = (np.arange(size, dtype=f) + f(0.5)) / f(size)
    roughness, dot_nv = centres, centres[:, None]
    view_x, view_z = np.sqrt(f(1) - dot_nv * dot_nv), dot_nv
    a2 = (roughness * roughness) ** 2
    k = (roughness / f(2)) ** 2
    g_view = dot_nv * (f(1) - k) + k  # mix(dotNV, 1, k)
    xi_x, xi_y = _hammersley(samples)
    scale, bias = np.zeros((size, size), f), np.zeros((size, size), f)
    zero = f(0)
    for i in range(samples):
        phi = f(2) * f(np.pi) * xi_x[i]
        cos_t = np.sqrt((f(1) - xi_y[i]) / (f(1) + (a2 - f(1)) * xi_y[i]))
        sin_t = np.sqrt(f(1) - cos_t * cos_t)
        h_x, h_z = sin_t * np.sin(phi), cos_t  # H.y meets V.y = 0 only: not needed
        v_dot_h = view_x * h_x + view_z * h_z
        dot_nl = np.maximum(f(2) * v_dot_h * h_z - view_z, zero)
        dot_vh = np.maximum(v_dot_h, zero)
        g_vis = dot_nl / (g_view * (dot_nl * (f(1) - k) + k)) * dot_vh / np.maximum(h_z, zero)
        fresnel = (f(1) - dot_vh) ** 5
        lit = dot_nl > zero
        scale += np.where(lit, (f(1) - fresnel) * g_vis, zero)
        bias += np.where(lit, fresnel * g_vis, zero)
    return (np.stack([scale, bias], axis=-1) / f(samples)).astype(np.float16)


def _hammersley(samples: int) -> tuple[np.ndarray, np.ndarray]:
    """The shader's Hammersley points: i / N, and i's bits reversed (van der Corput) over 2^32."""
    i = np.arange(samples, dtype=np.uint32)
    bits = (i << 16) | (i >> 16)
    for shift, mask in ((1, 0x55555555), (2, 0x33333333), (4, 0x0F0F0F0F), (8, 0x00FF00FF)):
        bits = ((bits & mask) << shift) | ((bits & ~np.uint32(mask)) >> shift)
    return i.astype(np.float32) / np.float32(samples), bits.astype(np.float32) * np.float32(2.0**-32)


def table_path() -> Path:
    """Where this sim env keeps the table (it travels with the env when a node stages it). The name
    carries what the table is computed from: a change to the formula must change the name."""
    return Path(sys.prefix) / "share" / "harness" / f"brdf_lut_{SIZE}x{SAMPLES}.npy"


def load_or_build(path: Path) -> np.ndarray:
    """The table kept at `path`; one that is missing or unreadable is computed and stored there
    (atomically, so sims starting together never read half a file), or only computed where the
    env is read-only."""
    try:
        table = np.load(path, allow_pickle=False)
        if table.shape == (SIZE, SIZE, 2) and table.dtype == np.float16:
            return table
        log.warning("%s holds an array of %s %s, not the BRDF table: computing it again", path,
                    table.dtype, table.shape)  # fmt: skip
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        log.warning("cannot read the BRDF table %s (%s): computing it again", path, exc)
    table = compute()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as tmp:
            np.save(tmp, table)
        os.replace(tmp.name, path)
    except OSError as exc:
        log.warning("cannot store the BRDF table at %s (%s): each sim process computes it", path, exc)
        if tmp is not None:  # a full disk must not leave half a table beside the env
            Path(tmp.name).unlink(missing_ok=True)
    return table


def texture(table: np.ndarray) -> Any:
    """`table` as the renderer's own is sampled: linear, clamped to its edges, one mip level."""
    import sapien

    return sapien.render.RenderTexture(table, 2, FORMAT, 1, "linear", "edge", False)


@functools.cache
def _texture() -> Any:
    return texture(load_or_build(table_path()))


def give_to(sensors: Iterable[Any]) -> None:
    """Give the table to the render cameras of ManiSkill `sensors` (before their first picture)."""
    for sensor in sensors:
        for camera in getattr(getattr(sensor, "camera", None), "_render_cameras", ()):
            camera.set_texture(TEXTURE_NAME, _texture())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Compute the renderer's BRDF table into this sim env, if it is not there yet "
        f"({table_path()}); scripts/setup.sh runs it.",
    )
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path = table_path()
    load_or_build(path)
    print(f"BRDF table: {path}")


if __name__ == "__main__":
    sys.exit(run_command("brdf_lut", main))
