"""vla-eval 0.8.0's batching model server on the batching benchmark's cost, for a side-by-side figure.

A `PredictModelServer` whose `predict_batch` sleeps 20 ms + 1 ms per item (max_batch_size 8, its
default max_wait_time of 10 ms), served by vla-eval's own WebSocket server in a process of its own;
clients use vla-eval's own `Connection`. Images go raw (`set_image_format("raw")`, not vla-eval's
PNG default) so the two servers see the same bytes and the figure compares the schedulers.
Run by `benchmarks/batching.py --vla-eval`; `--serve PORT` is the server process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MAX_BATCH, MAX_WAIT_S = 8, 0.01


def serve(port: int, cost_ms: float, per_item_ms: float) -> None:
    from vla_eval.model_servers.predict import PredictModelServer
    from vla_eval.model_servers.serve import serve as ws_serve
    from vla_eval.protocol.numpy_codec import set_image_format

    class Sleeper(PredictModelServer):
        def predict_batch(self, obs_batch: list[Any], ctx_batch: list[Any]) -> list[Any]:
            time.sleep((cost_ms + per_item_ms * len(obs_batch)) / 1000)
            return [{"actions": np.zeros((4, 10), np.float32)} for _ in obs_batch]

    set_image_format("raw")
    ws_serve(Sleeper(max_batch_size=MAX_BATCH, max_wait_time=MAX_WAIT_S), host="127.0.0.1", port=port)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_vla_eval(tmp: Path, cost_ms: float, per_item_ms: float) -> tuple[subprocess.Popen, str]:
    """The server process and its URL, once it accepts connections."""
    port = free_port()
    cmd = [
        sys.executable,
        __file__,
        "--serve",
        str(port),
        "--cost-ms",
        str(cost_ms),
        "--per-item-ms",
        str(per_item_ms),
    ]
    log = (tmp / "vla_eval.log").open("w")
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"ws://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"vla-eval server did not start: see {tmp / 'vla_eval.log'}") from None
            time.sleep(0.1)


def vla_eval_client(url: str, index: int, start: float, end: float, counts: Any) -> None:
    """As `batching.ours_client`: act back to back, count the answers that land in [start, end)."""
    from vla_eval.connection import Connection
    from vla_eval.protocol.numpy_codec import set_image_format

    from benchmarks.batching import observation

    set_image_format("raw")
    obs = observation(index)

    async def run() -> int:
        n = 0
        async with Connection(url) as conn:
            await conn.start_episode({"task": "PickCube", "seed": index})
            while time.monotonic() < end:
                await conn.act(obs)
                n += start <= time.monotonic() < end
        return n

    counts[index] = asyncio.run(run())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--serve", type=int, required=True, metavar="PORT", help="serve on 127.0.0.1:PORT")
    p.add_argument("--cost-ms", type=float, default=20.0, help="fixed cost of a call (default 20)")
    p.add_argument("--per-item-ms", type=float, default=1.0, help="cost per batch item (default 1)")
    args = p.parse_args()
    serve(args.serve, args.cost_ms, args.per_item_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
