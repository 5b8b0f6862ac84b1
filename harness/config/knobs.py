"""Every eval knob, with its one default, in one place.

Python reads knobs through `get*`; shell scripts export them with
`eval "$("$SIM_PY" -m harness.config.knobs --shell)"`, which prints `VAR="${VAR:-default}"` lines from this
table, so a default is never written twice. `--markdown` prints docs/knobs.md, the knob page (a test
keeps the file equal to it: regenerate with `python -m harness.config.knobs --markdown > docs/knobs.md`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from harness.config.knobtypes import (
    FLAG,
    MAPPING,
    NAME,
    TEXT,
    WORDS,
    Accepts,
    choice,
    integer,
    number,
    seconds,
)
from harness.process.failures import run_command

WIRE_CODECS = ("msgpack", "json")  # harness.wire.codecs.CODECS (tests/wire checks they agree)
DEFAULT_MAX_FRAME = 64 << 20  # WIRE_MAX_FRAME's default: harness.wire.frames' (tests/wire checks)


@dataclass(frozen=True)
class Knob:
    name: str
    default: str
    doc: str
    contract: bool = True  # part of the run's contract (run.yaml); False for operational knobs
    # an integer >= 0: the contract freezes the integer ("08" is 8), and a value that is none is
    # refused when the run is created, naming the knob
    count: bool = False
    accepts: Accepts = TEXT  # its type and range: checked at run creation and worker start

    def problem(self, value: str) -> str | None:
        """None when `value` is accepted, else `knob NAME=value: expected <form>`."""
        if value == "" and self.default == "":  # unset, said the shell way
            return None
        why = self.accepts.problem(value)
        return None if why is None else f"knob {self.name}={value!r}: {why}"


# fmt: off
KNOBS: dict[str, Knob] = {
    k.name: k
    for k in [
        # what is evaluated
        Knob("STUDY_RUN", "", "run dir name under $RUNS_ROOT (shared lease queue + results)", False,
             accepts=NAME),
        Knob("POLICY", "hold", "policy wrapper under policy/<name>/"),
        Knob("CKPT_NAME", "", "checkpoint: a path, or a dir name under $BUNDLE/checkpoints"),
        Knob("POLICY_ARGS", "", "extra `key=value` overrides of deploy_policy.yml, space separated",
             accepts=WORDS),
        Knob("BENCHMARK", "maniskill",
             "benchmark: `maniskill`, `libero`, `metaworld`, `vla-eval:module:Class` or `module:Class`"),
        Knob("BENCH_CONFIG", "clean",
             "bench config: ManiSkill level (clean, clutter3, ...), LIBERO suite, MetaWorld MT10/MT50"),
        Knob("BENCH_PARAMS", "", "benchmark parameters (vla-eval constructor, LIBERO settings): a mapping",
             accepts=MAPPING),
        Knob("SEEDS_ROOT", "seeds/maniskill", "seed bank root (relative to $BUNDLE unless absolute)"),
        Knob("USE_EVAL_SEEDS", "1",
             "1: seeds from the seed bank, <SEEDS_ROOT>/<task>/<task_config>.txt; 0: seeds 0..N-1",
             accepts=FLAG),
        Knob("EVAL_TEST_NUM", "10", "seeds per (scene, task) cell: the first N of the bank", False,
             accepts=integer(1)),
        Knob("EVAL_STOP", "fixed",
             "stopping rule per cell: fixed, precision:<h> (anytime-valid 95% interval within ±h) or "
             "compare:<baseline run>:<margin>; EVAL_TEST_NUM is the cap"),
        # observation and action handling
        Knob("PRIMARY_CAM", "base_camera", "camera sent first to the policy"),
        Knob("VIDEO_CAM", "base_camera", "camera recorded into the episode video"),
        Knob("IMAGE_SIZE", "224", "camera image height and width in pixels", accepts=integer(1)),
        Knob("EXEC_ACTIONS", "0", "actions executed per chunk: 0 = whole chunk, k = k then re-query",
             accepts=integer(0)),
        Knob("ACTION_SMOOTH", "0", "cross-chunk EMA weight alpha (reference models used 0.7)",
             accepts=number(0, 1)),
        Knob("SMOOTH_ROT", "1", "1: smooth xyz + rot6d; 0: xyz only (the gripper never)", accepts=FLAG),
        Knob("FAKE_PROPRIO", "0", "1: proprio = last commanded action instead of the robot state",
             accepts=FLAG),
        Knob(
            "ACTION_CONVENTION",
            "",
            "action convention the sim applies (empty: the benchmark's own; ManiSkill: ee6d, ee_delta, "
            "joint_pos); gripper +1 open, -1 closed",
        ),
        # rendering
        Knob("RENDER_SHADER", "default", "SAPIEN shader pack (default, rt, rt-fast, minimal)"),
        Knob("RT_SPP", "1", "ray-tracing samples per pixel (only for rt shaders)", accepts=integer(1)),
        Knob("DENOISER", "none", "ray-tracing denoiser", accepts=choice("none", "oidn", "optix")),
        Knob("RECORD_VIDEO", "1", "1: write videos/seed<N>.mp4 per episode", accepts=FLAG),
        # in the contract: a kept env rebuilds its scene under the episode seed, a fresh one under
        # ManiSkill's fixed build seed; the same episode only while no task randomises at build
        Knob("SIM_ENV_CACHE", "2", "built envs a sim process keeps for later seeds: 0 (off) to 64",
             count=True, accepts=integer(0, 64)),
        Knob("SIM_PIN", "",
             "simulator pin `pkg==ver [companion ...]` from $WHEELHOUSE, e.g. `sapien==3.0.2 setuptools<81`"),
        # queue and worker
        # UNIT_SEEDS changes no result, but every worker of a run must cut the same unit keys
        Knob("UNIT_SEEDS", "auto",
             "seeds per unit: auto = sized when the run is created (frozen), 0 = whole cell, k = slices of k",
             accepts=integer(0, words=("auto",))),
        Knob("EVAL_RESUME_SEEDS", "1", "1: run only seeds not yet recorded", False, accepts=FLAG),
        Knob("LEASE_TTL", "60", "seconds without heartbeat before a lease is reclaimed", False,
             accepts=seconds()),
        Knob("HEARTBEAT_S", "5", "seconds between lease heartbeats", False, accepts=seconds()),
        Knob("LEASE_SKEW_S", "5", "tolerance added to LEASE_TTL for clock skew between nodes", False,
             accepts=number(0)),
        Knob("CRASH_LIMIT", "3", "errored attempts of a unit before it is quarantined", False,
             accepts=integer(1)),
        Knob("WORKER_FAULT_LIMIT", "3",
             "attempts in a row failing for a model server or node cause before the worker stops (exit 1)",
             False, accepts=integer(1)),
        Knob("CANARY", "1", "1: each sim process runs the run's canary (docs/trust.md); 0: none",
             False, accepts=FLAG),
        Knob("STALL_TIMEOUT", "300", "seconds a sim client may make no progress before it is killed", False,
             accepts=seconds()),
        Knob("PER_TASK_TIMEOUT", "7200", "seconds one unit may take before it is killed", False,
             accepts=seconds()),
        Knob("MODEL_START_TIMEOUT", "900", "seconds a worker waits for its model server to be ready", False,
             accepts=seconds()),
        Knob("WORKERS_PER_GPU", "1", "workers per GPU (each worker gets one GPU share)", False,
             accepts=integer(1)),
        Knob("CPU_WORKERS", "auto", "workers on a node without GPUs (auto: fill the allocation)", False,
             accepts=integer(1, words=("auto",))),
        Knob("SIMS_PER_WORKER", "auto", "sim slots per worker sharing its model server: 1..64 or auto", False,
             accepts=integer(1, 64, words=("auto",))),
        # wire
        Knob("WIRE_CODEC", "msgpack", "msgpack (fast) or json (reference-compatible)", False,
             accepts=choice(*WIRE_CODECS)),
        Knob("WIRE_MAX_FRAME", str(DEFAULT_MAX_FRAME), "largest accepted frame in bytes", False,
             accepts=integer(1)),
        Knob("MODEL_SERVER_BIND", "127.0.0.1", "model server listen address", False),
        Knob("MODEL_SERVER_HOST", "", "model server address for clients (cross-node)", False),
        Knob("MODEL_SERVER_MAX_CONNS", "256", "connections a model server holds; more are closed", False,
             accepts=integer(1)),
        Knob(
            "MODEL_SERVER_HELLO_TIMEOUT",
            "30",
            "seconds a new model server connection has for a successful hello before it is closed",
            False,
            accepts=seconds(),
        ),
        # in the contract: a batched float model's answers move in the last bits with what each
        # request is batched with (padding, kernel choice), so 1 (unbatched) and 8 are two evals
        Knob(
            "MODEL_MAX_BATCH",
            "0",
            "cap on requests per model call (0: the wrapper's `max_batch`; 1: unbatched)",
            count=True,
            accepts=integer(0),
        ),
        Knob("MODEL_BATCH_WAIT_MS", "5",
             "longest a batch waits for sessions expected to join it, in ms", False, accepts=number(0, 1000)),
        Knob("SIM_AS_SERVER", "0", "1: the sim side listens and the model side connects", False,
             accepts=FLAG),
        # other ecosystems' policy servers (docs/policy-servers.md)
        Knob("MODEL_SERVER_PROTOCOL", "native",
             "what our server speaks (openpi, vlaeval: their WebSocket protocols)", False,
             accepts=choice("native", "openpi", "vlaeval")),
        Knob("MODEL_SERVER_MAP", "", "openpi mode: YAML of openpi keys (empty: ours)", False),
        Knob("POLICY_SERVER", "", "external openpi/vla-eval server host:port", False),
        Knob("POLICY_SERVER_MAP", "", "mapping YAML of the external server (protocol, keys, sizes)", False),
        Knob("POLICY_SERVER_RETRIES", "3", "connection attempts to the external server, each time", False,
             accepts=integer(1)),
        Knob("POLICY_SERVER_TIMEOUT", "300", "seconds to wait for one reply of the external server", False,
             accepts=seconds()),
        # node
        Knob("NODE_CACHE", "/tmp/eval_node_cache", "node-local cache for staged envs/checkpoints", False),
        Knob("CACHE_KEEP", "", "checkpoints to keep in the node cache, space separated", False,
             accepts=WORDS),
        Knob("CACHE_MAX_GB", "40", "node cache size bound in GB", False, accepts=number(0)),
        # results
        Knob("RESULTS_VIDEOS", "link", "organize_results video tree: relative links, copies or none", False,
             accepts=choice("link", "copy", "none")),
        Knob("STAGE_ENVS", "sim model",
             "venvs copied into NODE_CACHE: sim, model, lerobot (`none`: in place; the local pool defaults "
             "to none)", False, accepts=WORDS),
        Knob("STAGE_BACKBONES", "", "HF hub dirs under $HF_HOME/hub staged with the checkpoint", False,
             accepts=WORDS),
        Knob("WHEELHOUSE", "envs/wheelhouse",
             "SIM_PIN wheels (relative to $EVAL_ROOT unless absolute)", False),
        Knob("NODE_NAME", "", "node name in worker ids and logs (empty: Slurm node name or hostname)", False),
        # orchestrators
        Knob("LAUNCHER", "local",
             "how orchestrators start pools: local (node scripts here), srun, or submitit (one Slurm job "
             "of N nodes x 1 task, task logs under the run's logs/submitit)", False,
             accepts=choice("local", "srun", "submitit")),
        Knob("POOL_NODES", "2", "nodes in an orchestrator's pool (sweep, fill-in, multi-model pool)", False,
             accepts=integer(1)),
        Knob("SRUN_ARGS", "",
             "extra srun arguments, e.g. `--partition=gpu --gres=gpu:1`; with LAUNCHER=submitit the "
             "job's sbatch options (`--name=value`, `--flag`, -p -t -A -q -C -c -w -x -J)", False),
        # model server memory (harness.model.inflight)
        Knob("MODEL_SERVER_INFLIGHT_BYTES", str(2 * DEFAULT_MAX_FRAME),
             "request memory a model server's connections hold at once: 2 bytes per byte of each frame "
             "over 256 KiB (the body and what it decodes into); more wait, then get a `server busy` error",
             False, accepts=integer(1)),
    ]
}
# fmt: on


def get(name: str, env: Mapping[str, str] | None = None) -> str:
    """The knob's value: the environment's (`env`, else os.environ), else its default."""
    return (os.environ if env is None else env).get(name, KNOBS[name].default)


def get_int(name: str, env: Mapping[str, str] | None = None, minimum: int | None = None) -> int:
    value = int(_parse(name, int, env))
    if minimum is not None and value < minimum:
        raise ValueError(f"knob {name}={value!r}: expected an integer >= {minimum}")
    return value


def get_choice(name: str, choices: tuple[str, ...], env: Mapping[str, str] | None = None) -> str:
    value = get(name, env)
    if value not in choices:
        raise ValueError(f"knob {name}={value!r}: expected one of {', '.join(choices)}")
    return value


def get_float(name: str) -> float:
    return float(_parse(name, float))


def get_bool(name: str) -> bool:
    value = get(name).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"knob {name}={value!r}: expected 0 or 1")


def _parse(name: str, kind: type, env: Mapping[str, str] | None = None) -> float:
    value = get(name, env)
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"knob {name}={value!r}: expected {kind.__name__}") from None


def contract_knobs(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The values of the knobs that define what an eval measures, in `env` (default: os.environ), as
    the code resolves them: an unset knob is its default, a count its integer; a count the code
    would refuse raises ValueError naming the knob."""
    source = os.environ if env is None else env
    return {
        name: str(get_int(name, source, minimum=0)) if knob.count else source.get(name, knob.default)
        for name, knob in KNOBS.items()
        if knob.contract
    }


def shell_exports() -> str:
    return "\n".join(f'export {k.name}="${{{k.name}:-{k.default}}}"' for k in KNOBS.values())


def markdown_table() -> str:
    rows = ["| knob | default | contract | accepts | meaning |", "| --- | --- | --- | --- | --- |"]
    for k in KNOBS.values():
        default = f"`{k.default}`" if k.default else "(empty)"
        accepts = k.accepts.describe()
        rows.append(f"| `{k.name}` | {default} | {'yes' if k.contract else ''} | {accepts} | {k.doc} |")
    return "\n".join(rows)


KNOB_PAGE_INTRO = """\
# Knobs

<!-- generated by `python -m harness.config.knobs --markdown > docs/knobs.md`; do not edit by hand -->

Every knob has one default, set in `harness/config/knobs.py` and overridable from the environment
(shell scripts export each as `${VAR:-default}` through `python -m harness.config.knobs --shell`).
Contract knobs (`yes` below) are frozen in a run's `run.yaml`: a launch into the run with a
different value is refused, naming the knob ([runs.md](runs.md)). The rest change how a run is
carried out, never what it measures.
"""


def markdown_page() -> str:
    """docs/knobs.md: the knob table with its introduction."""
    return f"{KNOB_PAGE_INTRO}\n{markdown_table()}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--shell", action="store_true", help="print export lines for a shell to eval")
    group.add_argument("--markdown", action="store_true", help="print the knob page, docs/knobs.md")
    args = parser.parse_args()
    if args.shell:
        print(shell_exports())
    else:
        sys.stdout.write(markdown_page())


if __name__ == "__main__":
    sys.exit(run_command("knobs", main))
