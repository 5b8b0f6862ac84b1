"""Wire benchmark: one sim-client step round trip on loopback, per codec.

The observation is 3 cameras × 224×224×3 uint8 + a 10-D proprio; the reply a 30×10 float32 chunk
(the `hold` policy, so the model costs ~nothing). The server runs in a separate process, as in a
real worker. Three codecs: msgpack, our JSON, and the reference JSON+base64 done the plain way
(stdlib json + base64, str round trips), measured in the same run. Prints the median µs per round
trip; the last line is `msgpack_rt_us=<n> json_rt_us=<n> plain_json_rt_us=<n>`. It prints figures;
it does not pass or fail on speed.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness.wire import codecs
from harness.wire.client import PolicyClient

BLOCK = 20  # round trips of one codec in a row
WARM = 3  # round trips before each block, not timed
SPEC = {"benchmark": "bench", "robot": "panda", "action_dim": 10, "cameras": ["a", "b", "c"]}


class PlainJsonCodec:
    """The reference's way: base64 → str, json.dumps → str → bytes, and back."""

    name = "plain_json"

    def encode(self, msg: dict[str, Any]) -> bytes:
        def default(obj: Any) -> Any:
            if isinstance(obj, np.ndarray):
                return {
                    "__ndarray__": base64.b64encode(obj.tobytes()).decode(),
                    "dtype": str(obj.dtype),
                    "shape": list(obj.shape),
                }
            raise TypeError(type(obj).__name__)

        return json.dumps(msg, default=default).encode()

    def decode(self, body: bytes | bytearray) -> dict[str, Any]:
        def hook(obj: dict[str, Any]) -> Any:
            if "__ndarray__" in obj:
                data = base64.b64decode(obj["__ndarray__"])
                return np.frombuffer(data, dtype=obj["dtype"]).reshape(obj["shape"])
            return obj

        return json.loads(body.decode(), object_hook=hook)


codecs.CODECS["plain_json"] = PlainJsonCodec


def serve(ready: str) -> None:
    from harness.model.policyload import load_policy
    from harness.model.server import ModelServer

    ModelServer(load_policy("hold"), ready).serve_forever()


def observation() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    images = {cam: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for cam in SPEC["cameras"]}
    return {"images": images, "proprio": rng.standard_normal(10).astype(np.float32)}


def measure(ready: Path, names: list[str], iters: int) -> dict[str, float]:
    """Median µs of one infer round trip per codec (encode, send, server decode + policy + encode,
    receive, decode). The codecs take turns in blocks of BLOCK round trips, so load from other
    processes hits all of them alike, while each block runs as a sim client does: one codec, warm
    (a round trip right after another codec's pays that codec's allocator churn: ~1 ms here)."""
    obs = observation()
    clients = {}
    for name in names:
        clients[name] = PolicyClient.from_ready_file(ready, timeout_s=60, codec=name)
        clients[name].hello(SPEC)
        assert type(clients[name]._codec) is codecs.CODECS[name]
        clients[name].reset("bench", "bench", "hold still", 0)
    times: dict[str, list[float]] = {name: [] for name in names}
    for block in range(-(-iters // BLOCK)):
        for name, client in clients.items():
            for step in range(block * BLOCK - WARM, (block + 1) * BLOCK):
                start = time.perf_counter()
                chunk = client.infer(obs, step)
                if step >= block * BLOCK:
                    times[name].append(time.perf_counter() - start)
                assert chunk.shape == (30, 10)
    for client in clients.values():
        client.close()
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iters", type=int, default=200, help="round trips per codec (default 200)")
    parser.add_argument("--serve", metavar="READY_FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready.json"
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(ready)])
        try:
            results = measure(ready, ["msgpack", "json", "plain_json"], args.iters)
        finally:
            server.terminate()
            server.wait(30)
    for name, us in results.items():
        print(f"{name:>10}: median {us:8.0f} µs per round trip")
    print(" ".join(f"{name}_rt_us={us:.0f}" for name, us in results.items()))


if __name__ == "__main__":
    main()
