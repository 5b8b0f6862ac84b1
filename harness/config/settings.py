"""One process's settings: every knob, read from its environment once, checked, typed and frozen.

Why: knobs were read where they were used, so one value was parsed again at every use, a bad value
surfaced wherever it was first read (possibly an hour into a run), and what a function depended on
was hidden in its body. Each process's entry point now builds one `Settings` from its environment
(`Settings.from_env`) and passes it down; library code takes the fields it needs as parameters and
never reads the environment for a knob. The environment stays the process boundary: a child process
builds its own from the environment it was given.

A knob's field is its name in lower case, typed by what the knob table declares it accepts
(`harness.config.knobtypes`): an integer is an `int` (`None` for `auto` where the knob takes it), a
number a `float`, a flag a `bool`, space-separated words a tuple, anything else the text itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness.config.knobs import KNOBS
from harness.config.knobtypes import Accepts
from harness.config.validate import InputRefused, knob_problems

TRUE_WORDS = ("1", "true", "yes", "on")  # a flag's true values; the table accepts their opposites too


@dataclass(frozen=True)
class Settings:
    """Every knob's value for one process, and the run contract's hash it verified (if any)."""

    study_run: str
    policy: str
    ckpt_name: str
    policy_args: tuple[str, ...]
    benchmark: str
    bench_config: str
    bench_params: str
    seeds_root: str
    use_eval_seeds: bool
    eval_test_num: int
    eval_stop: str
    primary_cam: str
    video_cam: str
    image_size: int
    exec_actions: int
    action_smooth: float
    smooth_rot: bool
    fake_proprio: bool
    action_convention: str
    render_shader: str
    rt_spp: int
    denoiser: str
    record_video: bool
    sim_env_cache: int
    sim_pin: str
    unit_seeds: int | None
    eval_resume_seeds: bool
    lease_ttl: float
    heartbeat_s: float
    lease_skew_s: float
    crash_limit: int
    worker_fault_limit: int
    canary: bool
    stall_timeout: float
    per_task_timeout: float
    model_start_timeout: float
    workers_per_gpu: int
    cpu_workers: int | None
    sims_per_worker: int | None
    wire_codec: str
    wire_max_frame: int
    model_server_bind: str
    model_server_host: str
    model_server_max_conns: int
    model_server_hello_timeout: float
    model_max_batch: int
    model_batch_wait_ms: float
    sim_as_server: bool
    model_server_protocol: str
    model_server_map: str
    policy_server: str
    policy_server_map: str
    policy_server_retries: int
    policy_server_timeout: float
    node_cache: str
    cache_keep: tuple[str, ...]
    cache_max_gb: float
    results_videos: str
    stage_envs: tuple[str, ...]
    stage_backbones: tuple[str, ...]
    wheelhouse: str
    node_name: str
    launcher: str
    pool_nodes: int
    srun_args: str
    model_server_inflight_bytes: int
    # EVAL_CONTRACT: the run contract's hash, set by the worker once it verified the run ("" before);
    # every record carries it
    contract: str = ""

    @classmethod
    def defaults(cls) -> Settings:
        """Every knob at its default: for library calls that are given no settings (tests, tools)."""
        return cls.from_env({})

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """The settings `env` gives (an unset knob is its default). Every value is checked against
        its declaration first: InputRefused (a ValueError) names every refused knob, one line each."""
        problems = knob_problems(env)
        if problems:
            raise InputRefused("refusing these knob values:", problems)
        values = {
            name.lower(): typed(env.get(name, knob.default), knob.accepts) for name, knob in KNOBS.items()
        }
        return cls(**values, contract=env.get("EVAL_CONTRACT", ""))


def typed(text: str, accepts: Accepts) -> object:
    """An accepted knob value as its field holds it."""
    if accepts.kind == "int":
        return None if text in accepts.words else int(text)
    if accepts.kind == "number":
        return float(text)
    if accepts.kind == "flag":
        return text.lower() in TRUE_WORDS
    if accepts.kind == "words":
        return tuple(text.split())
    return text
