"""Canary episodes: does this node simulate the run's episodes the way the run's first node did?

Once per sim process and run, before its first episode, the sim process runs the run's canary (in
its warm-up, overlapping the model server's load, when the worker started it for the run; else the
sim client, at its first unit): the run's first unit's first seed, built as every episode is, driven
by a fixed action sequence with no policy (the seed bank's expert trace for that seed where the bank
has one, else zeros), CANARY_STEPS steps. Each step's physics state (`episode.physics_state()`:
ManiSkill's full scene state, LIBERO's MuJoCo state; the proprio where an adapter has none) goes into
the trajectory, hashed (sha256 of the float64 bytes), and the last rendered frame is kept.

The first canary of a run becomes its reference, `<run>/canary/reference.npz`: written to a unique
temporary name, then hard-linked onto that name, an exclusive create, so over NFS too exactly one
node's canary is the reference. Every later canary is compared with it: equal hashes, or the first
step whose states differ, the largest state difference, and the frame's PSNR. Each node fingerprint's
verdict goes to `<run>/canary/<fingerprint id>.json` (the first canary of that fingerprint; the same
fingerprint simulates the same way, or the canary is what shows it does not), which the results
tools read before they pool fingerprint groups (`harness.results.load.check_pooling`).

What it cannot see: a rendering difference below what the policy reacts to that leaves the physics
equal (the frame's PSNR is shown, not judged), and physics that differs only on seeds, tasks or
steps the canary does not reach; GPU physics that is not deterministic run to run differs from
itself, which the canary reports as a difference.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.paths import bundle_root
from harness.config.plan import planned_seeds
from harness.config.rundir import RunDir
from harness.config.seedbank import bank_file, resolve_root
from harness.config.settings import Settings
from harness.episode.bench import Benchmark
from harness.episode.nodeprint import fingerprint_id, sim_facts

CANARY_DIR = "canary"
CANARY_STEPS = 20
REFERENCE = "reference.npz"


@dataclass(frozen=True)
class Trajectory:
    states: np.ndarray  # [steps + 1, D] float64: the state after the reset, then after each action
    frame: np.ndarray  # the last rendered frame (uint8), or an empty array

    @property
    def sha256(self) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.states, dtype=np.float64).tobytes()).hexdigest()


@dataclass(frozen=True)
class CanaryVerdict:
    """A canary against the run's reference."""

    fingerprint: str | None
    host: str
    task: str
    seed: int
    steps: int
    sha256: str
    reference_sha256: str
    reference_host: str
    match: bool
    first_difference: int | None  # the first step whose states differ (0: right after the reset)
    max_state_diff: float
    frame_psnr: float | None  # dB; None where either frame is missing (inf when equal)
    seconds: float
    is_reference: bool = False

    def text(self) -> str:
        if self.is_reference:
            return f"canary {self.task} seed {self.seed}: this node's canary is the run's reference"
        if self.match:
            return f"canary {self.task} seed {self.seed}: matches the reference ({self.reference_host})"
        return (
            f"canary {self.task} seed {self.seed}: DIFFERS from the reference ({self.reference_host}): "
            f"first at step {self.first_difference}, largest state difference {self.max_state_diff:.3g}, "
            f"frame PSNR {_db(self.frame_psnr)}"
        )

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if out["frame_psnr"] is not None and math.isinf(out["frame_psnr"]):
            out["frame_psnr"] = "inf"
        return out


def _db(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "identical" if math.isinf(value) else f"{value:.1f} dB"


def canary_dir(run_root: Path) -> Path:
    return Path(run_root) / CANARY_DIR


def physics_state(episode: Any) -> np.ndarray:
    state = getattr(episode, "physics_state", None)
    value = state() if state is not None else episode.observe()["proprio"]
    return np.asarray(value, dtype=np.float64).reshape(-1)


def rollout(
    episode: Any, actions: np.ndarray, steps: int = CANARY_STEPS, on_step: Callable[[int], None] | None = None
) -> Trajectory:
    """Drive `episode` with `actions` (repeating the last; zeros if none) for `steps` steps; `on_step`
    is told each step done (the sim client's progress file: the worker's stall watch sees it move)."""
    states = [physics_state(episode)]
    for step in range(steps):
        if len(actions):
            action = actions[min(step, len(actions) - 1)]
        else:
            action = np.zeros(episode.action_dim, np.float32)
        episode.apply(np.asarray(action, dtype=np.float32))
        states.append(physics_state(episode))
        if on_step is not None:
            on_step(step + 1)
    frame = np.zeros((0,), np.uint8)
    with contextlib.suppress(Exception):
        frame = np.asarray(episode.video_frame(), dtype=np.uint8)
    width = max(len(s) for s in states)
    padded = np.full((len(states), width), np.nan)
    for i, s in enumerate(states):
        padded[i, : len(s)] = s
    return Trajectory(padded, frame)


def psnr(a: np.ndarray, b: np.ndarray) -> float | None:
    if a.size == 0 or b.size == 0 or a.shape != b.shape:
        return None
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def compare(ours: Trajectory, ref: Trajectory) -> tuple[bool, int | None, float, float | None]:
    """(match, first differing step, largest state difference, frame PSNR)."""
    if ours.sha256 == ref.sha256:
        return True, None, 0.0, psnr(ours.frame, ref.frame)
    steps, width = min(len(ours.states), len(ref.states)), max(ours.states.shape[1], ref.states.shape[1])
    a, b = np.full((steps, width), np.nan), np.full((steps, width), np.nan)
    a[:, : ours.states.shape[1]] = ours.states[:steps]
    b[:, : ref.states.shape[1]] = ref.states[:steps]
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    differing = np.flatnonzero(~same.all(axis=1))
    first = int(differing[0]) if len(differing) else steps
    diff = np.abs(a - b)
    largest = float(np.nanmax(diff)) if np.isfinite(diff).any() else math.inf
    if (np.isnan(a) != np.isnan(b)).any():
        largest = math.inf  # the states differ in size: not the same scene
    return False, first, largest, psnr(ours.frame, ref.frame)


def _load(path: Path) -> tuple[Trajectory, dict[str, Any]]:
    with np.load(path) as data:
        return Trajectory(data["states"], data["frame"]), json.loads(str(data["meta"]))


def _exclusive_write(path: Path, data: bytes) -> bool:
    """Write `path` whole (temporary file, fsync, hard link); False when it was already there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


DONE: set[str] = set()  # the runs this process has run its canary for


def run_canary(
    run_root: Path,
    episode: Any,
    actions: np.ndarray,
    task: str,
    seed: int,
    fingerprint: str | None,
    on_step: Callable[[int], None] | None = None,
) -> CanaryVerdict:
    """Roll the canary out on `episode` (built for `task`, `seed`), compare it with the run's
    reference (becoming it when there is none yet), and record the verdict under `fingerprint` (the
    node's sim-side fingerprint id, `harness.episode.nodeprint.sim_id`)."""
    started = time.monotonic()
    traj = rollout(episode, actions, on_step=on_step)
    host = socket.gethostname()
    meta = {"host": host, "fingerprint": fingerprint, "task": task, "seed": seed, "sha256": traj.sha256}
    folder = canary_dir(run_root)
    reference = folder / REFERENCE
    buffer = io.BytesIO()
    np.savez(buffer, states=traj.states, frame=traj.frame, meta=np.array(json.dumps(meta)))
    became = _exclusive_write(reference, buffer.getvalue())
    ref, ref_meta = (traj, meta) if became else _load(reference)
    match, first, largest, frame_psnr = compare(traj, ref)
    verdict = CanaryVerdict(
        fingerprint, host, task, seed, len(traj.states) - 1, traj.sha256, ref_meta["sha256"],
        str(ref_meta.get("host")), match, first, largest, frame_psnr, round(time.monotonic() - started, 3),
        is_reference=became,
    )  # fmt: skip
    name = f"{fingerprint or 'unknown'}.json"
    _exclusive_write(folder / name, (json.dumps(verdict.as_dict(), sort_keys=True) + "\n").encode())
    return verdict


def read_verdicts(run_root: Path) -> dict[str, dict[str, Any]]:
    """Each fingerprint's canary verdict in a run, by fingerprint id."""
    out = {}
    for path in sorted(canary_dir(run_root).glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            out[path.stem] = json.loads(path.read_text())
    return out


def expert_actions(traces_file: Path, seed: int) -> np.ndarray:
    """The seed bank's expert trace of `seed` (empty when the bank has none)."""
    with contextlib.suppress(OSError, KeyError, ValueError), np.load(traces_file) as npz:
        return np.asarray(npz[f"seed{seed}"], dtype=np.float32)
    return np.zeros((0, 0), np.float32)


def run_once(
    bench: Benchmark,
    settings: Settings,
    run_dir: Path,
    report: Callable[[str], None],
    on_step: Callable[[int], None] | None = None,
) -> None:
    """This process's canary of the run `run_dir`, once: the run's first unit's first seed, no policy;
    `on_step` is told each step (the progress file). A canary that cannot run says why and is
    skipped: the unit runs either way. CANARY=0: none."""
    key = str(Path(run_dir).resolve())
    if not settings.canary or key in DONE or not RunDir(run_dir).manifest.exists():
        return
    DONE.add(key)
    try:
        cell, seeds = next(iter(planned_seeds(run_dir).items()))  # the run's first unit
        seed = seeds[0]
        root = resolve_root(settings.seeds_root, str(bundle_root(os.environ)))
        traces = bank_file(root, cell, settings.bench_config).with_suffix(".traces.npz")
        banked = settings.use_eval_seeds
        actions = expert_actions(traces, seed) if banked else np.zeros((0, 0), np.float32)
        episode = bench.make_episode(cell.task, settings.bench_config, seed)
        try:
            fingerprint = fingerprint_id(sim_facts())
            verdict = run_canary(run_dir, episode, actions, cell.task, seed, fingerprint, on_step=on_step)
        finally:
            with contextlib.suppress(Exception):  # a broken simulator's close must not hide why
                episode.close()
    except Exception as exc:
        report(f"canary not run: {type(exc).__name__}: {exc}"[:300])
        return
    report(verdict.text() + f" ({verdict.seconds:.1f} s)")
