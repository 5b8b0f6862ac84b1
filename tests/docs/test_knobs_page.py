"""docs/knobs.md is the generator's output, and every knob the code reads is a knob of
harness/config/knobs.py (or one of the environment variables below that are not knobs)."""

from __future__ import annotations

import re

from docpages import DOCS, ROOT
from knob_reads import knob_reads

from harness.config import knobs

REGENERATE = "python -m harness.config.knobs --markdown > docs/knobs.md"

# Environment variables the code reads that are not eval knobs: each is set by a script or by Slurm,
# never chosen by a user for an eval, so it has no default in knobs.py.
NOT_KNOBS = {
    "EVAL_ROOT": "the code root, set by env.sh (and by the node script to its code copy)",
    "BUNDLE": "checkpoints and seed banks root, set by env.sh",
    "RUNS_ROOT": "where run dirs live, set by env.sh",
    "SIM_PY": "the sim env's python, set by env.sh / the node script",
    "MODEL_PY": "the model env's python, set by env.sh / the node script",
    "LEROBOT_PY": "the LeRobot env's python (its own pins), set by env.sh",
    "HF_HOME": "Hugging Face cache, set by env.sh (offline)",
    "PYTHONPATH": "set by the node script to its code copy",
    "CKPT_DIR": "node-local checkpoint path, exported by the node script to its workers",
    "CUDA_VISIBLE_DEVICES": "the GPU a worker gets, set by the node script",
    "EVAL_NODE_PID": "the node script's pid, for its workers' parent-death checks",
    "WORKER_ID": "a worker's id, set by the node script",
    "RUN_DIR": "a worker's run dir, set by whoever starts it (else $RUNS_ROOT/$STUDY_RUN)",
    "EVAL_CONTRACT": "the run's contract hash, exported by the worker after its check",
    "MODEL_SERVER_TOKEN": "a per-run secret for non-loopback binds, generated when unset",
    "SLURM_JOB_ID": "Slurm's",
    "SLURMD_NODENAME": "Slurm's",
    "SLURM_JOB_END_TIME": "Slurm's",
    "SLURM_CPUS_ON_NODE": "Slurm's (the node's sizing reads it)",
    "SLURM_JOB_NUM_NODES": "Slurm's (UNIT_SEEDS=auto's expected nodes)",
    "LOCAL_POOL_NODES": "a local pool's node count, set by harness.launch.pools: each sizes to its share",
    "EVAL_WORKER_CORES": "a worker's share of the node's cores, set by the node script's sizing",
    "DEMO_NODES": "scripts/demo.sh's local node count (a demo argument, not an eval knob)",
}


def test_knob_page_is_the_generated_one() -> None:
    page = (DOCS / "knobs.md").read_text()
    assert page == knobs.markdown_page(), f"docs/knobs.md is out of date: regenerate with `{REGENERATE}`"


def test_every_knob_the_code_reads_is_documented() -> None:
    reads = knob_reads()
    unknown = {n: where for n, where in reads.items() if n not in knobs.KNOBS and n not in NOT_KNOBS}
    assert not unknown, (
        "read from the environment but not a knob in harness/config/knobs.py (add it there, then "
        f"`{REGENERATE}`; or, if it is not a user's knob, to NOT_KNOBS here with why): {unknown}"
    )
    stale = sorted(set(NOT_KNOBS) - set(reads))
    assert not stale, f"NOT_KNOBS names variables the code no longer reads: {stale}"


def test_every_documented_knob_exists_with_its_default() -> None:
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \| (.*?) \| (yes)? \|", (DOCS / "knobs.md").read_text(), re.M)
    documented = {name: (default, bool(contract)) for name, default, contract in rows}
    code = {k.name: (f"`{k.default}`" if k.default else "(empty)", k.contract) for k in knobs.KNOBS.values()}
    assert documented == code


def test_knob_names_the_pages_mention_exist() -> None:
    """A `NAME` in backticks that looks like a knob (upper case, an underscore) on any page is a knob,
    an environment variable above, or a name the pages say is something else."""
    others = {
        "SIGTERM", "SIGKILL", "SIGSTOP", "EMFILE", "ENFILE",  # signals and errnos
        "MESA_SHADER_CACHE_DIR", "MESA_DISK_CACHE_MULTI_FILE",  # Mesa's, measured and not set
        "LP_NUM_THREADS",  # lavapipe's thread count, measured and not set
        "ENVS_ROOT",  # set by env.sh, read by shell only
        "TEST_NODE_CACHE",  # the test suite's, not the product's (docs/testing.md)
        "ENCODER_NICE", "CODE_PATHS", "CODE_ROOT", "UNIT_END", "RECORD_FIELDS", "FIELD_CHECKS",
        "REQUEST_TYPES", "NOT_KNOBS",  # Python constants the pages name
    }  # fmt: skip
    missing = set()
    for page in [ROOT / "README.md", *DOCS.glob("*.md")]:
        for name in re.findall(r"`([A-Z][A-Z0-9]*_[A-Z0-9_]+)(?:=[^`]*)?`", page.read_text()):
            if name not in knobs.KNOBS and name not in NOT_KNOBS and name not in others:
                missing.add(f"{page.name}: {name}")
    assert not missing, f"knob-like names that are no knob: {sorted(missing)}"
