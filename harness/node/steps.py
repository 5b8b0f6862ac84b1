"""The decisions of the node script (`slurm/eval_node.sh`), which stays a thin shell launcher.

`name`: this node's name. `prepare`: stage the envs, checkpoint and backbones into NODE_CACHE (if
cold), install SIM_PIN into the staged sim env, refresh the code copy, prune the cache, and print the
`export` lines that point the workers at the node-local copies. `plan`: one line `<worker-id>
<cuda-devices or -> <SIMS_PER_WORKER> <cores>` per worker, sized by `harness.node.sizing` (one per
GPU share, WORKERS_PER_GPU of each GPU, or CPU_WORKERS without GPUs; `auto` fills the allocation), and the
sizing's one line on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from harness.config import knobs
from harness.config.paths import resolve_checkpoint
from harness.config.settings import Settings
from harness.node.codesync import code_copy
from harness.node.holds import HoldError, hold
from harness.node.sizing import detect, size_node
from harness.node.staging import GB, StagingError, Wanted, node_lock, prune, stage, want
from harness.node.venvs import install_pin, is_venv, relocate
from harness.process.failures import run_command

PYTHONS = ("SIM_PY", "MODEL_PY", "LEROBOT_PY")  # each env's Python, as env.sh exports them


def node_name(configured: str = "") -> str:
    """`configured` (NODE_NAME), else Slurm's node name, else the short hostname."""
    return configured or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def worker_plan(settings: Settings, log=print) -> list[tuple[str, str, str, int]]:
    """(worker id, CUDA_VISIBLE_DEVICES, SIMS_PER_WORKER, cores) per worker, as `sizing` sizes this
    node (its one line goes to `log`); ids are unique per node and Slurm job."""
    node = node_name(settings.node_name)
    job = os.environ.get("SLURM_JOB_ID")
    prefix = f"{node}-j{job}" if job else node
    plan = size_node(detect(), settings)
    log(f"[node {node}] {plan.why}")
    return [
        (f"{prefix}-w{i}", dev, plan.sims_per_worker, plan.worker_cores) for i, dev in enumerate(plan.devices)
    ]


def prepare(settings: Settings, log=print) -> dict[str, str]:
    """Stage, pin, refresh and prune on this node; returns the environment the workers should get."""
    cache = Path(settings.node_cache)
    eval_root = Path(os.environ["EVAL_ROOT"]).resolve()
    pin = settings.sim_pin.strip()
    envs = [] if settings.stage_envs == ("none",) else list(settings.stage_envs)
    unknown = set(envs) - {"sim", "model", "lerobot"}
    if unknown:
        raise StagingError(f"STAGE_ENVS={' '.join(envs)!r}: unknown env(s) {sorted(unknown)}")
    if pin and "sim" not in envs:
        raise StagingError(f"SIM_PIN={pin} needs the sim env staged: add 'sim' to STAGE_ENVS")
    out = {key: os.environ.get(key, "") for key in PYTHONS} | {"CKPT_DIR": ""}
    with node_lock(cache):
        holder = int(os.environ.get("EVAL_NODE_PID") or os.getppid())  # the node script, for its lifetime
        (cache / "code").mkdir(parents=True, exist_ok=True)
        code = code_copy(eval_root, cache / "code")
        log(f"[node] code of {eval_root}: version {code.name} in {code}")
        hub = Path(os.environ.get("HF_HOME", "")) / "hub"
        wanted, posts = _choose(settings, cache, envs, out, hub, eval_root, log)
        in_use = {w.root for w in wanted.values()}  # making room for one never removes another
        staged = {key: stage(w, keep=in_use, post=posts.get(key), log=log) for key, w in wanted.items()}
        for key in PYTHONS:
            if key in staged:
                out[key] = str(staged[key] / "bin" / "python")
        if "CKPT_DIR" in staged:
            out["CKPT_DIR"] = str(staged["CKPT_DIR"])
        backbones = {key.split("/", 1)[1]: path for key, path in staged.items() if key.startswith("hub/")}
        if backbones:
            out["HF_HOME"] = str(_backbone_home(cache, hub, backbones))
        hold([code, *in_use], holder)
        keep = set(settings.cache_keep)
        removed = prune(cache, int(settings.cache_max_gb * GB), in_use, keep)
        for path in removed:
            log(f"[node] pruned {path} (cache over CACHE_MAX_GB={settings.cache_max_gb:g})")
    log(f"[node] SIM_PY={out['SIM_PY']} MODEL_PY={out['MODEL_PY']} CKPT_DIR={out['CKPT_DIR'] or '-'}")
    out["EVAL_ROOT"] = str(code)
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p and Path(p).resolve() != eval_root]
    out["PYTHONPATH"] = ":".join([str(code), *rest])
    return out


def _choose(
    settings: Settings, cache: Path, envs: list[str], pythons: dict[str, str], hub: Path, eval_root: Path, log
) -> tuple[dict[str, Wanted], dict[str, Callable[[Path], None]]]:
    """Everything this launch will use (by export name, `hub/<name>` for a backbone), chosen before
    anything is copied, and the step each venv copy needs before it is published."""
    wanted: dict[str, Wanted] = {}
    posts: dict[str, Callable[[Path], None]] = {}
    pin = settings.sim_pin.strip()
    for env_name in envs:
        key = f"{env_name.upper()}_PY"
        venv, env_pin = _venv_of(Path(pythons[key])), pin if env_name == "sim" else ""
        wanted[key] = want(cache, "env", venv, extra=env_pin)
        posts[key] = _venv_post(venv, env_pin, Path(settings.wheelhouse), eval_root, log)
    ckpt = resolve_checkpoint(settings.ckpt_name)
    if ckpt is not None:
        wanted["CKPT_DIR"] = want(cache, "ckpt", ckpt)
    for name in settings.stage_backbones:
        if not (hub / name).is_dir():
            raise StagingError(f"STAGE_BACKBONES: {hub / name} does not exist")
        wanted[f"hub/{name}"] = want(cache, "hf", hub / name)
    return wanted, posts


def _venv_of(python: Path) -> Path:
    """The venv whose python `python` is (not resolved: a venv's python links to the base one)."""
    venv = Path(os.path.abspath(python)).parent.parent
    if not is_venv(venv):
        raise StagingError(
            f"cannot stage {python}: {venv} is not a Python venv (set STAGE_ENVS=none to run in place)"
        )
    return venv


def _venv_post(venv: Path, pin: str, wheelhouse: Path, eval_root: Path, log) -> Callable[[Path], None]:
    """What a fresh copy of `venv` needs before it is published: relocating, and `pin` installed
    from `wheelhouse` (WHEELHOUSE: relative to `eval_root` unless absolute)."""
    wheelhouse = wheelhouse if wheelhouse.is_absolute() else eval_root / wheelhouse

    def post(copy: Path) -> None:
        relocate(copy, venv)
        if pin:
            log(f"[node] installing SIM_PIN={pin} from {wheelhouse} into {copy}")
            log(f"[node] SIM_PIN verified: {install_pin(copy, pin, wheelhouse)}")

    return post


def _backbone_home(cache: Path, hub: Path, staged: dict[str, Path]) -> Path:
    """A node-local HF_HOME whose hub links the staged backbones locally and everything else to NFS."""
    local = cache / "hf_home" / hashlib.sha256(str(hub.parent).encode()).hexdigest()[:8]
    (local / "hub").mkdir(parents=True, exist_ok=True)
    links = {child.name: child for child in hub.iterdir()} if hub.is_dir() else {}
    links.update(staged)
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
        settings = Settings.from_env(os.environ)  # every knob checked once, here
        if args.action == "name":
            print(node_name(settings.node_name))
        elif args.action == "plan":
            plan = worker_plan(settings, lambda msg: print(msg, file=sys.stderr))
            for worker, devices, sims, cores in plan:
                print(worker, devices or "-", sims, cores)
        else:
            env = prepare(settings, log=lambda msg: print(msg, file=sys.stderr, flush=True))
            print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items()))
    except (StagingError, HoldError, ValueError) as err:
        print(f"[node {node_name(knobs.get('NODE_NAME'))}] error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    sys.exit(run_command("node", main))
