"""The decisions of the node script (`slurm/eval_node.sh`), which stays a thin shell launcher.

`name`: this node's name. `prepare`: stage the envs, checkpoint and backbones into NODE_CACHE (if
cold), install SIM_PIN into the staged sim env, refresh the code copy, prune the cache, and print the
`export` lines that point the workers at the node-local copies. `plan`: one line `<worker-id>
<cuda-devices or -> <SIMS_PER_WORKER> <cores>` per worker, sized by `harness.node.sizing` (one per
GPU slot x WORKERS_PER_GPU, or CPU_WORKERS without GPUs; `auto` fills the allocation), and the
sizing's one line on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import socket
import sys
from pathlib import Path

from harness.config import knobs
from harness.config.failures import run_command
from harness.config.paths import resolve_checkpoint
from harness.node.codesync import code_copy
from harness.node.sizing import detect, size_node
from harness.node.staging import GB, StagingError, hold, node_lock, prune, stage
from harness.node.venvs import install_pin, is_venv, relocate


def node_name() -> str:
    """NODE_NAME, else Slurm's node name, else the short hostname."""
    return knobs.get("NODE_NAME") or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def worker_plan(log=print) -> list[tuple[str, str, str, int]]:
    """(worker id, CUDA_VISIBLE_DEVICES, SIMS_PER_WORKER, cores) per worker, as `sizing` sizes this
    node (its one line goes to `log`); ids are unique per node and Slurm job."""
    node = node_name()
    job = os.environ.get("SLURM_JOB_ID")
    prefix = f"{node}-j{job}" if job else node
    plan = size_node(detect())
    log(f"[node {node}] {plan.why}")
    return [
        (f"{prefix}-w{i}", dev, plan.sims_per_worker, plan.worker_cores) for i, dev in enumerate(plan.devices)
    ]


def prepare(log=print) -> dict[str, str]:
    """Stage, pin, refresh and prune on this node; returns the environment the workers should get."""
    cache = Path(knobs.get("NODE_CACHE"))
    eval_root = Path(os.environ["EVAL_ROOT"]).resolve()
    pin = knobs.get("SIM_PIN").strip()
    wanted = [] if knobs.get("STAGE_ENVS").strip() == "none" else knobs.get("STAGE_ENVS").split()
    unknown = set(wanted) - {"sim", "model"}
    if unknown:
        raise StagingError(f"STAGE_ENVS={knobs.get('STAGE_ENVS')!r}: unknown env(s) {sorted(unknown)}")
    if pin and "sim" not in wanted:
        raise StagingError(f"SIM_PIN={pin} needs the sim env staged: add 'sim' to STAGE_ENVS")
    out = {"SIM_PY": os.environ["SIM_PY"], "MODEL_PY": os.environ["MODEL_PY"], "CKPT_DIR": ""}
    in_use: set[Path] = set()
    with node_lock(cache):
        holder = int(os.environ.get("EVAL_NODE_PID") or os.getppid())  # the node script, for its lifetime
        (cache / "code").mkdir(parents=True, exist_ok=True)
        code = code_copy(eval_root, cache / "code", holder)
        log(f"[node] code of {eval_root}: version {code.name} in {code}")
        for env_name in wanted:
            key = f"{env_name.upper()}_PY"
            python = out[key]
            out[key] = str(_stage_env(cache, Path(python), pin if env_name == "sim" else "", eval_root, log))
            in_use.add(Path(out[key]).parent.parent.parent)
        ckpt = resolve_checkpoint(knobs.get("CKPT_NAME"))
        if ckpt is not None:
            staged = stage(cache, "ckpt", ckpt, log=log)
            out["CKPT_DIR"] = str(staged)
            in_use.add(staged.parent)
        backbones = knobs.get("STAGE_BACKBONES").split()
        if backbones:
            out["HF_HOME"] = str(_stage_backbones(cache, Path(os.environ["HF_HOME"]), backbones, in_use, log))
        for root in in_use:
            hold(root, holder)
        keep = set(knobs.get("CACHE_KEEP").split())
        removed = prune(cache, int(knobs.get_float("CACHE_MAX_GB") * GB), in_use, keep)
        for path in removed:
            log(f"[node] pruned {path} (cache over CACHE_MAX_GB={knobs.get('CACHE_MAX_GB')})")
    log(f"[node] SIM_PY={out['SIM_PY']} MODEL_PY={out['MODEL_PY']} CKPT_DIR={out['CKPT_DIR'] or '-'}")
    out["EVAL_ROOT"] = str(code)
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p and Path(p).resolve() != eval_root]
    out["PYTHONPATH"] = ":".join([str(code), *rest])
    return out


def _stage_env(cache: Path, python: Path, pin: str, eval_root: Path, log) -> Path:
    """Stage the venv of `python` (with the pin installed when given); returns the staged python."""
    venv = Path(os.path.abspath(python)).parent.parent
    if not is_venv(venv):
        raise StagingError(
            f"cannot stage {python}: {venv} is not a Python venv (set STAGE_ENVS=none to run in place)"
        )
    wheelhouse = Path(knobs.get("WHEELHOUSE"))
    wheelhouse = wheelhouse if wheelhouse.is_absolute() else eval_root / wheelhouse

    def post(copy: Path) -> None:
        relocate(copy, venv)
        if pin:
            log(f"[node] installing SIM_PIN={pin} from {wheelhouse} into {copy}")
            log(f"[node] SIM_PIN verified: {install_pin(copy, pin, wheelhouse)}")

    return stage(cache, "env", venv, extra=pin, post=post, log=log) / "bin" / "python"


def _stage_backbones(cache: Path, hf_home: Path, names: list[str], in_use: set[Path], log) -> Path:
    """A node-local HF_HOME whose hub links the staged backbones locally and everything else to NFS."""
    hub = hf_home / "hub"
    local = cache / "hf_home" / hashlib.sha256(str(hf_home).encode()).hexdigest()[:8]
    (local / "hub").mkdir(parents=True, exist_ok=True)
    links = {child.name: child for child in hub.iterdir()} if hub.is_dir() else {}
    for name in names:
        if not (hub / name).is_dir():
            raise StagingError(f"STAGE_BACKBONES: {hub / name} does not exist")
        links[name] = stage(cache, "hf", hub / name, log=log)
        in_use.add(links[name].parent)
    for name, target in links.items():
        link = local / "hub" / name
        tmp = link.with_name(f".{name}.link{os.getpid()}")
        tmp.symlink_to(target)
        os.replace(tmp, link)
    return local


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("action", choices=["name", "plan", "prepare"])
    args = parser.parse_args()
    try:
        if args.action == "name":
            print(node_name())
        elif args.action == "plan":
            for worker, devices, sims, cores in worker_plan(lambda msg: print(msg, file=sys.stderr)):
                print(worker, devices or "-", sims, cores)
        else:
            env = prepare(log=lambda msg: print(msg, file=sys.stderr, flush=True))
            print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items()))
    except (StagingError, ValueError) as err:
        print(f"[node {node_name()}] error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    sys.exit(run_command("node", main))
