"""Operator mistakes, round two (issue 26): each bad command line a new user typed, as a table.

Every case used to be accepted (exit 0, then nothing useful happened), accepted at run creation and
refused only by the pool, or a traceback. Now each is refused when the run is created (or when the
pool starts, for the knobs only nodes read): exit 2, stderr naming the input and the form it takes,
no traceback, and nothing written: no run dir, no directory outside $RUNS_ROOT, no lease. The pool
calls a fault during the run (a model server that keeps dying) a failure: exit 1, never "refused".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MIKASA = "vla-eval:vla_eval.benchmarks.mikasa:MIKASABenchmark"
UNITS = "s1 t1\ns2 t1\n"
SLEEP_POLICY = ROOT / "tests" / "policies" / "sleep"
CRASHING_POLICY = '''
import os

import numpy as np


class Model:
    def generate_actions(self, proprio):
        return np.zeros((len(proprio), 4, 10), np.float32)


def get_model(usr_args):
    return Model()


def encode_obs(obs):
    os._exit(1)  # the model server dies at every first observation


def reset_model(model):
    pass
'''
POLICY_YML = "action_dim: 10\nnum_actions: 4\ncameras: []\nmax_batch: 8\ndeterministic: true\n"


def base_env(tmp: Path) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "ENVS_ROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        BUNDLE=str(tmp), RUNS_ROOT=str(tmp / "runs"), STUDY_RUN="r", POLICY=str(SLEEP_POLICY),
        BENCHMARK="tests.support.fastbench:FastBench", SEEDS_ROOT="bank", EVAL_TEST_NUM="2", RECORD_VIDEO="0",
        NODE_CACHE=str(tmp / "cache"), HEARTBEAT_S="1", LEASE_TTL="4", FASTBENCH_STEPS="2",
        FASTBENCH_STEP_MS="2", CPU_WORKERS="1", PYTHONPATH=str(ROOT), EVAL_ROOT=str(ROOT),
    )  # fmt: skip
    env["SIM_PY"] = os.environ.get("SIM_PY", str(ROOT / "envs" / "sim" / "bin" / "python"))
    env["MODEL_PY"] = os.environ.get("MODEL_PY", str(ROOT / "envs" / "model" / "bin" / "python"))
    return env


def safetensors_bytes() -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    return struct.pack("<Q", len(header)) + header + b"\0" * 16


def reference_like(path: Path, weights: bytes) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "tokenizer.json").write_text("{}")
    (path / "tokenizer_config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(weights)
    return path


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Banks, queues and checkpoints for every case; `work/` is the directory commands run in."""
    tmp = tmp_path_factory.mktemp("bundle")
    for bank, seeds in (("bank", "0 1 2 3"), ("negbank", "-1 0 1 2")):
        (tmp / bank / "t1").mkdir(parents=True)
        for scene in ("s1", "s2"):
            (tmp / bank / "t1" / f"{scene}_clean.txt").write_text(seeds)
    (tmp / "msbank" / "PickCube").mkdir(parents=True)
    (tmp / "msbank" / "PickCube" / "table_clean.txt").write_text("4294967296 1 2")
    (tmp / "queue.txt").write_text(UNITS)
    (tmp / "msqueue.txt").write_text("table PickCube\n")
    (tmp / "mikasaqueue.txt").write_text("mikasa RememberColor3-v0\n")
    checkpoints = tmp / "checkpoints"  # CKPT_NAME=<name> is $BUNDLE/checkpoints/<name>
    checkpoints.mkdir()
    (checkpoints / "ck_file").write_text("not a directory")
    (checkpoints / "ck_empty").mkdir()
    reference_like(checkpoints / "ck_whole", safetensors_bytes())
    reference_like(checkpoints / "ck_truncated", safetensors_bytes()[:-5])
    (tmp / "crashing").mkdir()
    (tmp / "crashing" / "deploy_policy.py").write_text(CRASHING_POLICY)
    (tmp / "crashing" / "deploy_policy.yml").write_text(POLICY_YML)
    (tmp / "work").mkdir()
    return tmp


def new_run(tmp: Path, run: str, queue: str = "queue.txt", **extra: str) -> subprocess.CompletedProcess:
    env = {**base_env(tmp), **extra}
    argv = [env["SIM_PY"], str(ROOT / "scripts" / "new_run.py"), run, "--queue", str(tmp / queue)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=tmp / "work")


def pool(tmp: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {**base_env(tmp), **extra}
    argv = ["bash", str(ROOT / "scripts" / "run_local.sh"), "1"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)


def everything_under(tmp: Path) -> set[str]:
    return {str(p.relative_to(tmp)) for p in tmp.rglob("*")}


MANISKILL = {"BENCHMARK": "maniskill", "POLICY": "hold", "SEEDS_ROOT": str(ROOT / "seeds" / "maniskill")}
Q, MQ, VQ = "queue.txt", "msqueue.txt", "mikasaqueue.txt"  # fast, ManiSkill and MIKASA queue files
# (case, run name, queue file, environment, what stderr must name)
NEW_RUN_CASES = [
    ("CRASH_LIMIT=0", "c1", Q, {"CRASH_LIMIT": "0"}, "knob CRASH_LIMIT='0': expected an integer >= 1"),
    ("CRASH_LIMIT=-3", "c2", Q, {"CRASH_LIMIT": "-3"}, "knob CRASH_LIMIT='-3': expected an integer >= 1"),
    ("STALL_TIMEOUT=0", "c3", Q, {"STALL_TIMEOUT": "0"}, "knob STALL_TIMEOUT='0': expected a number > 0"),
    ("STALL_TIMEOUT=-5", "c4", Q, {"STALL_TIMEOUT": "-5"}, "knob STALL_TIMEOUT='-5': expected a number > 0"),
    ("WIRE_CODEC=xml", "c5", Q, {"WIRE_CODEC": "xml"}, "WIRE_CODEC='xml': expected one of msgpack, json"),
    ("SIMS_PER_WORKER empty", "c6", Q, {"SIMS_PER_WORKER": ""},
     "knob SIMS_PER_WORKER='': expected an integer 1..64 or auto"),
    ("SIMS_PER_WORKER=' 2'", "c7", Q, {"SIMS_PER_WORKER": " 2"},
     "knob SIMS_PER_WORKER=' 2': expected an integer 1..64 or auto"),
    ("BENCH_PARAMS='{bad' on ManiSkill", "c8", MQ, {**MANISKILL, "BENCH_PARAMS": "{bad"},
     "knob BENCH_PARAMS='{bad': expected a YAML/JSON mapping"),
    ("BENCH_PARAMS on ManiSkill", "c9", MQ, {**MANISKILL, "BENCH_PARAMS": "{tasks: [a]}"},
     "only a vla-eval benchmark takes parameters"),
    ("POLICY=reference without CKPT_NAME", "c10", Q, {"POLICY": "reference"},
     "POLICY=reference needs a checkpoint: set CKPT_NAME"),
    ("CKPT_NAME a regular file", "c11", Q, {"POLICY": "reference", "CKPT_NAME": "ck_file"},
     "ck_file is not a directory"),
    ("CKPT_NAME an empty dir", "c12", Q, {"POLICY": "reference", "CKPT_NAME": "ck_empty"},
     "ck_empty lacks config.json, model.safetensors"),
    ("CKPT_NAME with a truncated model.safetensors", "c13", Q,
     {"POLICY": "reference", "CKPT_NAME": "ck_truncated"}, "model.safetensors: truncated or corrupt"),
    ("seed -1 in the bank", "c14", Q, {"SEEDS_ROOT": "negbank"}, "seed -1: expected integers >= 0"),
    ("seed 4294967296 on ManiSkill", "c15", MQ, {**MANISKILL, "SEEDS_ROOT": "msbank"},
     "seed(s) [4294967296] are outside what BENCHMARK=maniskill accepts (0..4294967295)"),
    ("empty run name", "", Q, {}, "run '': expected a run name"),
    ("run name ../escape", "../escape", Q, {}, "run '../escape': expected a run name"),
    ("run name a/b", "a/b", Q, {}, "run 'a/b': expected a run name"),
    ("vla-eval BENCH_PARAMS of the wrong type", "c16", VQ,
     {"BENCHMARK": MIKASA, "BENCH_PARAMS": "{tasks: 5}", "USE_EVAL_SEEDS": "0"},
     "BENCH_PARAMS: tasks: expected list[str] | None, got 5"),
    ("MODEL_SERVER_MAP that does not exist", "c17", Q, {"MODEL_SERVER_MAP": "/nonexistent.yaml"},
     "MODEL_SERVER_MAP=/nonexistent.yaml: cannot read it"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "run", "queue", "extra", "named"), NEW_RUN_CASES, ids=[c[0] for c in NEW_RUN_CASES]
)
def test_new_run_refuses_a_mistake_before_writing_anything(
    bundle: Path, what: str, run: str, queue: str, extra: dict[str, str], named: str
) -> None:
    if extra.get("BENCHMARK") == MIKASA and subprocess.call(
        [base_env(bundle)["SIM_PY"], "-c", "import vla_eval.benchmarks.mikasa"], stderr=subprocess.DEVNULL
    ):
        pytest.skip("vla-eval's MIKASA benchmark is not installed in the sim env")
    before = everything_under(bundle)
    result = new_run(bundle, run, queue, **extra)
    out = result.stdout + result.stderr
    assert result.returncode == 2, f"{what}: exit {result.returncode}\n{out[-3000:]}"
    assert named in result.stderr, f"{what}: stderr does not name {named!r}:\n{result.stderr[-3000:]}"
    assert "Traceback" not in out, f"{what}:\n{out[-3000:]}"
    assert everything_under(bundle) == before, f"{what}: wrote {everything_under(bundle) - before}"


def test_every_problem_is_one_line(bundle: Path) -> None:
    result = new_run(bundle, "c20", CRASH_LIMIT="0", WIRE_CODEC="xml", STALL_TIMEOUT="never")
    assert result.returncode == 2, result.stderr
    problems = [line for line in result.stderr.splitlines() if line.startswith("  - ")]
    assert [re.sub(r"=.*", "", p.removeprefix("  - knob ")) for p in problems] == [
        "CRASH_LIMIT", "STALL_TIMEOUT", "WIRE_CODEC"
    ], result.stderr  # fmt: skip


def test_a_whole_checkpoint_and_an_absolute_run_path_are_accepted(bundle: Path, tmp_path: Path) -> None:
    result = new_run(bundle, str(tmp_path / "elsewhere"), POLICY="reference", CKPT_NAME="ck_whole")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "elsewhere" / "run.yaml").is_file()


def test_new_run_counts_cells_and_queue_units_apart(bundle: Path, tmp_path: Path) -> None:
    """2 cells of 4 seeds cut by UNIT_SEEDS=2 are 4 queue units; run.yaml says 2 cells, not 2 units."""
    result = new_run(bundle, str(tmp_path / "sliced"), EVAL_TEST_NUM="4", UNIT_SEEDS="2")
    assert result.returncode == 0, result.stderr
    assert "2 cells in 4 queue units (UNIT_SEEDS=2)" in result.stdout, result.stdout
    queue = yaml.safe_load((tmp_path / "sliced" / "run.yaml").read_text())["contract"]["queue"]
    assert queue["cells"] == 2 and "units" not in queue


@pytest.fixture(scope="module")
def created(bundle: Path) -> Path:
    """A created run `r` of the fast benchmark, for the pool's cases."""
    made = new_run(bundle, "r")
    assert made.returncode == 0, made.stderr
    return bundle


POOL_CASES = [
    ("CRASH_LIMIT=0", {"CRASH_LIMIT": "0"}, "knob CRASH_LIMIT='0'"),
    ("CRASH_LIMIT=-3", {"CRASH_LIMIT": "-3"}, "knob CRASH_LIMIT='-3'"),
    ("STALL_TIMEOUT=0", {"STALL_TIMEOUT": "0"}, "knob STALL_TIMEOUT='0'"),
    ("STALL_TIMEOUT=-5", {"STALL_TIMEOUT": "-5"}, "knob STALL_TIMEOUT='-5'"),
    ("WIRE_CODEC=xml", {"WIRE_CODEC": "xml"}, "knob WIRE_CODEC='xml'"),
    ("SIMS_PER_WORKER=' 2'", {"SIMS_PER_WORKER": " 2"}, "knob SIMS_PER_WORKER=' 2'"),
]


@pytest.mark.parametrize(("what", "extra", "named"), POOL_CASES, ids=[c[0] for c in POOL_CASES])
def test_the_pool_refuses_a_node_knob_before_any_node_starts(
    created: Path, what: str, extra: dict[str, str], named: str
) -> None:
    run = created / "runs" / "r"
    before = everything_under(run)
    result = pool(created, **extra)
    out = result.stdout + result.stderr
    assert result.returncode == 2, f"{what}: exit {result.returncode}\n{out[-3000:]}"
    assert named in result.stderr and "Traceback" not in out, f"{what}:\n{out[-3000:]}"
    assert everything_under(run) == before, f"{what}: the pool started: {everything_under(run) - before}"


def test_a_model_server_that_keeps_dying_is_a_failure_not_a_refusal(bundle: Path, tmp_path: Path) -> None:
    tmp = tmp_path / "b"
    shutil.copytree(bundle, tmp, ignore=shutil.ignore_patterns("runs"))
    policy = str(tmp / "crashing")
    made = new_run(tmp, "dies", POLICY=policy, STUDY_RUN="dies")
    assert made.returncode == 0, made.stderr
    result = pool(tmp, POLICY=policy, STUDY_RUN="dies", MODEL_START_TIMEOUT="120")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-3000:]
    # the server's restart limit, or the worker's breaker on its model-server faults: either is a fault
    dying = r"model server died \d+ times|attempts in a row failed for a cause other than their unit"
    assert re.search(rf"run_local: failed: .*({dying})", result.stderr), out[-3000:]
    assert "refused" not in out, out[-3000:]


def test_the_docs_python_imports_import() -> None:
    """Each `from harness... import name` line of the pages names a module and a name that exist."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    lines = sorted({
        line.strip() for page in pages for line in page.read_text().splitlines()
        if re.fullmatch(r"\s*from harness[\w.]* import [\w, ]+", line)
    })  # fmt: skip
    assert lines, "no import lines found on the pages"
    argv = [sys.executable, "-c", "\n".join(lines)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"an import on the pages fails:\n{done.stderr[-2000:]}"


def test_every_default_is_accepted_by_its_own_declaration() -> None:
    from harness.config import knobs
    from harness.wire import frames
    from harness.wire.codecs import CODECS

    assert {n: k.problem(k.default) for n, k in knobs.KNOBS.items() if k.problem(k.default)} == {}
    assert set(knobs.WIRE_CODECS) == set(CODECS)  # the knob offers exactly the codecs the server knows
    assert knobs.DEFAULT_MAX_FRAME == frames.DEFAULT_MAX_FRAME  # config imports nothing of the wire


def test_check_node_knobs_names_each_refused_knob() -> None:
    from harness.config.validate import InputRefused, check_node_knobs

    check_node_knobs({"CRASH_LIMIT": "3", "SIMS_PER_WORKER": "auto", "LEASE_TTL": "2.5"})
    with pytest.raises(InputRefused) as refused:
        check_node_knobs({"CRASH_LIMIT": "0", "HEARTBEAT_S": "soon", "POOL_NODES": "2"})
    assert [p.split("=")[0] for p in refused.value.problems] == ["knob HEARTBEAT_S", "knob CRASH_LIMIT"]
    assert isinstance(refused.value, ValueError)  # the worker's `except ValueError` refuses: exit 2
