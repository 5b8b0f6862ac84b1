"""Batching benchmark: one model server, K sim clients, a model costing 20 ms + 1 ms per batch item.

The policy is the sleep double (`tests/policies/sleep`, infer_ms=20, per_item_ms=1, max_batch=8) in
a real model server process; each client is its own process with the real `PolicyClient` (msgpack
over the server's Unix socket, as a sim on the server's host), sending what the sim client sends: 3
cameras of 224×224×3 uint8, their camera parameters, a 10-D proprio, the instruction, and nothing to
do between replies (the model is the bottleneck). Measured: observations answered per second over a
window, per K = 1, 2, 4, 8, next to the ideal K / (20 + K) ms (every call full), and the same server
unbatched (MODEL_MAX_BATCH=1) at K = 1, in the same run, alternating, `--repeats` times. With
`--vla-eval`, vla-eval 0.8.0's batching server (max_wait_time 10 ms, its default) on the same cost
and payload, through its own client, too.
It prints figures; it does not pass or fail on speed.

Last line: `k1_vs_unbatched=<batched K=1 / unbatched K=1> k8_vs_ideal=<batched K=8 / ideal>`.

Example:
  $SIM_PY benchmarks/batching.py --seconds 5 --repeats 2
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.wire.client import PolicyClient  # noqa: E402

SLEEP = str(ROOT / "tests" / "policies" / "sleep")
COST_MS, PER_ITEM_MS = 20.0, 1.0
KS = (1, 2, 4, 8)
CAMERAS = ("base_camera", "hand_camera", "side_camera")
SPEC = {"benchmark": "bench", "robot": "panda", "action_dim": 10, "cameras": list(CAMERAS)}


def ideal(k: int) -> float:
    """Observations per second when every call carries all K requests and costs 20 + K ms."""
    return k / ((COST_MS + PER_ITEM_MS * k) / 1000)


def observation(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "images": {cam: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for cam in CAMERAS},
        "camera_params": {
            cam: {
                "intrinsic_cv": rng.standard_normal((3, 3)).astype(np.float32),
                "extrinsic_cv": rng.standard_normal((3, 4)).astype(np.float32),
                "cam2world_gl": rng.standard_normal((4, 4)).astype(np.float32),
            }
            for cam in CAMERAS
        },
        "proprio": rng.standard_normal(10).astype(np.float32),
        "state": {},
        "instruction": "pick up the red cube",
    }


def start_server(tmp: Path, name: str, max_batch: int) -> tuple[subprocess.Popen, Path]:
    ready = tmp / f"{name}.json"
    python = os.environ.get("MODEL_PY") or str(ROOT / "envs" / "model" / "bin" / "python")
    python = python if Path(python).exists() else sys.executable
    sets = [f"infer_ms={COST_MS:g}", f"per_item_ms={PER_ITEM_MS:g}", "load_s=0", "max_batch=8"]
    cmd = [python, str(ROOT / "scripts" / "policy_model_server.py"), "--policy", SLEEP]
    cmd += ["--ready-file", str(ready), *[arg for item in sets for arg in ("--set", item)]]
    env = dict(os.environ, PYTHONPATH=str(ROOT), EVAL_ROOT=str(ROOT), MODEL_MAX_BATCH=str(max_batch))
    env.pop("SLEEP_POLICY_MS", None)
    log = (tmp / f"{name}.log").open("w")
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), ready


def ours_client(ready: str, index: int, start: float, end: float, counts: Any) -> None:
    """One sim: hello, reset, then infer back to back; counts the replies that land in [start, end)."""
    obs = observation(index)
    with PolicyClient.from_ready_file(ready, timeout_s=60) as client:
        client.hello(SPEC)
        client.reset("PickCube", "clean", obs["instruction"], index)
        step, n = 0, 0
        while time.monotonic() < end:
            client.infer(obs, step)
            step += 1
            n += start <= time.monotonic() < end
    counts[index] = n


def measure(target: Any, ready: str, k: int, seconds: float, warm_s: float = 1.0) -> float:
    """Observations per second from K client processes over a `seconds` window after a warm-up."""
    ctx = mp.get_context("fork")
    counts = ctx.Array("i", k)
    start = time.monotonic() + warm_s
    procs = [ctx.Process(target=target, args=(ready, i, start, start + seconds, counts)) for i in range(k)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(seconds + 120)
        if p.exitcode != 0:
            raise RuntimeError(f"a client exited with {p.exitcode}")
    return sum(counts) / seconds


def batch_stats(ready: Path) -> dict[str, Any]:
    """The server's batch statistics (calls, items, sizes, busy_s), from a ping with `stats`."""
    with PolicyClient.from_ready_file(ready, timeout_s=60) as client:
        return client._call({"type": "ping", "stats": True})["stats"]


def run(seconds: float, repeats: int, with_vla_eval: bool) -> tuple[float, float]:
    """Every configuration `repeats` times, taking turns, so load from elsewhere hits all alike."""
    rates: dict[str, list[float]] = {}
    mean_b: dict[str, list[float]] = {}
    busy: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        procs = {name: start_server(Path(tmp), name, cap) for name, cap in (("batched", 0), ("unbatched", 1))}
        if with_vla_eval:
            from benchmarks.vla_eval_batching import start_vla_eval, vla_eval_client

            vla = start_vla_eval(Path(tmp), COST_MS, PER_ITEM_MS)
        try:
            for _ in range(repeats):
                for server, k in [("unbatched", 1)] + [("batched", k) for k in KS]:
                    name, ready = f"{server} K={k}", procs[server][1]
                    before = batch_stats(ready)
                    rates.setdefault(name, []).append(measure(ours_client, str(ready), k, seconds))
                    after = batch_stats(ready)
                    calls, items = after["calls"] - before["calls"], after["items"] - before["items"]
                    mean_b.setdefault(name, []).append(items / max(calls, 1))
                    busy.setdefault(name, []).append((after["busy_s"] - before["busy_s"]) / max(calls, 1))
                    if with_vla_eval and server == "batched":
                        rates.setdefault(f"vla-eval K={k}", []).append(
                            measure(vla_eval_client, vla[1], k, seconds)
                        )
        finally:
            for proc, _ in [*procs.values(), *([vla] if with_vla_eval else [])]:
                proc.terminate()
                proc.wait(30)
    print(f"{'server':<16}{'obs/s':>8}{'ideal':>8}{'ratio':>7}{'mean B':>8}{'call ms':>9}   obs/s per repeat")
    for name in sorted(rates, key=lambda n: (n.split()[0], int(n.rsplit("=", 1)[1]))):
        k, rate = int(name.rsplit("=", 1)[1]), statistics.mean(rates[name])
        b = f"{statistics.mean(mean_b[name]):8.2f}" if name in mean_b else f"{'-':>8}"
        call = f"{1000 * statistics.mean(busy[name]):9.1f}" if name in busy else f"{'-':>9}"
        each = " ".join(f"{r:.1f}" for r in rates[name])
        print(f"{name:<16}{rate:8.1f}{ideal(k):8.1f}{rate / ideal(k):7.3f}{b}{call}   {each}")
    k1 = statistics.mean(rates["batched K=1"]) / statistics.mean(rates["unbatched K=1"])
    return k1, statistics.mean(rates["batched K=8"]) / ideal(8)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0, help="measured window per configuration (default 5)")
    p.add_argument("--repeats", type=int, default=2, help="rounds over all configurations (default 2)")
    p.add_argument("--vla-eval", action="store_true", help="also measure vla-eval 0.8.0's batching server")
    args = p.parse_args(argv)
    if args.seconds <= 0 or args.repeats < 1:
        p.error("--seconds must be > 0 and --repeats >= 1")
    k1, k8 = run(args.seconds, args.repeats, args.vla_eval)
    print(f"k1_vs_unbatched={k1:.3f} k8_vs_ideal={k8:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
