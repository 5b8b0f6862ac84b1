"""GPU check: what a GPU node sizes itself to, and batching with a torch policy on its GPU.

Three parts, about 3 minutes in all (`--seconds 5`):
1. the node's sizing, as the node script would log it here (`harness.node.sizing`: GPUs from
   CUDA_VISIBLE_DEVICES or nvidia-smi, cores, memory), and what torch sees;
2. the reference policy (`policy/reference`, the shipped checkpoint) in a real model server on
   `--device` (default cuda), batched (`--set max_batch=8`) and unbatched, with K = 1, 2, 4, 8
   sim-like client processes over the same-host shared-memory wire (benchmarks/batching.py's
   clients and observation; msgpack where the machine's sandbox refuses shared memory, with the
   reason printed): observations/s, mean batch size and the model call's ms;
3. benchmarks/batching.py's sleep-double figure (`k8_vs_ideal`) on this machine, one round.

`--device cpu` runs the same on a machine without a GPU (a dry run of the script, not a GPU figure).
Last line: `gpus=<n> workers=<n> sims_per_worker=<s> ref_k1_obs_s=<r> ref_k8_obs_s=<r>
ref_k8_speedup=<batched K=8 / unbatched K=8> ref_k8_mean_batch=<b> k8_vs_ideal=<r> shm=<1|0>`.
It prints figures; it does not pass or fail on speed.

The model servers run on MODEL_PY, else envs/model's Python, else this one. It needs numpy, msgpack,
PyYAML, torch and transformers, nothing else (not websockets, not the simulator): a bare machine
whose Python has those (the lent GPU machine's image) runs it from a plain checkout.

Examples: on a GPU node after scripts/setup.sh, `$SIM_PY benchmarks/gpu_check.py`; on a lent GPU
machine, from the repository's root, `python3 benchmarks/gpu_check.py`.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import batching  # noqa: E402
from harness.config.settings import Settings  # noqa: E402
from harness.node.sizing import detect, size_node  # noqa: E402
from harness.wire.client import PolicyClient  # noqa: E402
from harness.wire.errors import WireError  # noqa: E402

KS = (1, 2, 4, 8)
CKPT = ROOT / "checkpoints" / "reference"


def model_python() -> str:
    python = os.environ.get("MODEL_PY") or str(ROOT / "envs" / "model" / "bin" / "python")
    return python if Path(python).exists() else sys.executable


def torch_devices(python: str) -> tuple[int, str]:
    """(CUDA GPUs torch sees in the model env, a line saying which), or (0, why not)."""
    probe = "import torch; n = torch.cuda.device_count(); print(n, f'torch {torch.__version__}:', n, " \
            "'CUDA GPU(s)', [torch.cuda.get_device_name(i) for i in range(n)])"  # fmt: skip
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return 0, f"cannot import torch: {done.stderr.strip()[-300:]}"
    count, _, line = done.stdout.strip().partition(" ")
    return int(count), line


def start_reference(
    tmp: Path, name: str, device: str, max_batch: int | None
) -> tuple[subprocess.Popen, Path]:
    ready = tmp / f"{name}.json"
    sets = [f"device={device}", *([f"max_batch={max_batch}"] if max_batch else [])]
    cmd = [model_python(), str(ROOT / "scripts" / "policy_model_server.py"), "--policy", "reference",
           "--ckpt", str(CKPT), "--ready-file", str(ready)]  # fmt: skip
    cmd += [arg for item in sets for arg in ("--set", item)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), EVAL_ROOT=str(ROOT), HF_HUB_OFFLINE="1")
    log = (tmp / f"{name}.log").open("w")
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), ready


def wait_started(name: str, proc: subprocess.Popen, ready: Path, timeout_s: float = 300.0) -> None:
    """Until the server's ready file appears; at once an error if it exited first (a package
    missing from the machine's image, say), not a client's timeout a minute later."""
    deadline = time.monotonic() + timeout_s
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the {name} model server exited with {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {name} model server was not ready within {timeout_s:g} s")
        time.sleep(0.1)


def shared_memory(ready: Path) -> str:
    """WIRE_SHM for the clients: "1" when this machine lets the wire's shared memory through (a
    sandbox may not), else "0" (msgpack on the same Unix socket), saying why."""
    try:
        with PolicyClient.from_ready_file(ready, timeout_s=60, shm="1") as client:
            client.hello(batching.SPEC)
    except (WireError, OSError) as exc:
        print(f"wire: msgpack, not shared memory: {exc}", flush=True)
        return "0"
    print("wire: shared memory", flush=True)
    return "1"


def reference_batching(
    device: str, seconds: float
) -> tuple[str, dict[str, dict[int, tuple[float, float, float]]]]:
    """(WIRE_SHM used, {batched, unbatched} -> K -> (obs/s, mean batch, call ms)), K = 1, 2, 4, 8."""
    figures: dict[str, dict[int, tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        servers = {name: start_reference(Path(tmp), name, device, cap)
                   for name, cap in (("batched", 8), ("unbatched", None))}  # fmt: skip
        try:
            for name, (proc, ready) in servers.items():
                wait_started(name, proc, ready)
            wire = shared_memory(servers["batched"][1])
            client = functools.partial(batching.ours_client, shm=wire)
            print(f"{'server':<12}{'K':>3}{'obs/s':>9}{'mean B':>8}{'call ms':>9}", flush=True)
            for name, (_, ready) in servers.items():
                for k in KS:
                    before = batching.batch_stats(ready)
                    rate = batching.measure(client, str(ready), k, seconds)
                    after = batching.batch_stats(ready)
                    calls = max(after["calls"] - before["calls"], 1)
                    mean_b = (after["items"] - before["items"]) / calls
                    call_ms = 1000 * (after["busy_s"] - before["busy_s"]) / calls
                    figures.setdefault(name, {})[k] = (rate, mean_b, call_ms)
                    print(f"{name:<12}{k:>3}{rate:9.1f}{mean_b:8.2f}{call_ms:9.1f}", flush=True)
        except Exception:
            for name in servers:
                log = Path(tmp) / f"{name}.log"
                print(f"--- {name} model server log ---\n{log.read_text()[-3000:]}", file=sys.stderr)
            raise
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(30)
    return wire, figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="the reference policy's device: cuda (default), cpu")
    p.add_argument("--seconds", type=float, default=5.0, help="measured window per configuration (default 5)")
    args = p.parse_args(argv)
    if args.seconds <= 0:
        p.error("--seconds must be > 0")
    resources = detect()
    sizing = size_node(resources, Settings.from_env(os.environ))
    print(f"node {sizing.why}", flush=True)
    python = model_python()
    gpus, seen = torch_devices(python)
    print(f"{python}: {seen}", flush=True)
    if args.device.startswith("cuda") and gpus == 0:
        p.error(f"torch in {python} sees no CUDA GPU; --device cpu runs the check on the CPU (a dry run)")

    print(f"reference policy on {args.device}:", flush=True)
    try:
        wire, figures = reference_batching(args.device, args.seconds)
    except RuntimeError as exc:  # the servers' logs are printed above
        p.exit(1, f"gpu_check: {exc}\n")
    k1, k8 = figures["batched"][1][0], figures["batched"][8][0]
    speedup = k8 / figures["unbatched"][8][0]

    _, k8_vs_ideal = batching.run(args.seconds, 1, False, wire)
    print(
        f"gpus={len(resources.gpus)} workers={len(sizing.devices)} sims_per_worker={sizing.sims_per_worker} "
        f"ref_k1_obs_s={k1:.1f} ref_k8_obs_s={k8:.1f} ref_k8_speedup={speedup:.2f} "
        f"ref_k8_mean_batch={figures['batched'][8][1]:.2f} k8_vs_ideal={k8_vs_ideal:.3f} shm={wire}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
