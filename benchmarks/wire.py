"""Wire benchmark: one sim-client step round trip, per transport and codec.

The observation is 3 cameras × 224×224×3 uint8 + a 10-D proprio; the reply a 30×10 float32 chunk
(the `hold` policy, so the model costs ~nothing). The servers run in processes of their own, as in a
real worker. Measured in the same run, taking turns in blocks: msgpack over the model server's Unix
socket (what a sim client on the server's host uses), msgpack over TCP loopback (across hosts),
JSON (the reference protocol's codec) over the Unix socket; a plain memcpy of the observation's
arrays into a buffer (the physical floor); and, on the same payload, the two other ecosystems'
protocols over WebSocket: openpi (our server in MODEL_SERVER_PROTOCOL=openpi mode,
harness.wire.openpi's client) and vla-eval (vla-eval's own `serve` with a `hold`
PredictModelServer, harness.wire.vlaeval's client). Then `msgpack_after_step`: each round trip
after a sim step's stand-in (STEP_S of this core streaming through 8 MB while the server waits),
as every request of a real run comes.

Where: with two cores or more, this process runs on the first and the servers on the second, so
each end has a core, as a sim and its model server have on a node with room; `--no-pin` leaves
that to the kernel. Prints the placement, then the median and p90 µs per round trip; the last line
is `msgpack_rt_us=<n> msgpack_tcp_rt_us=<n> json_rt_us=<n> memcpy_rt_us=<n> openpi_rt_us=<n>
vla_eval_rt_us=<n> msgpack_after_step_rt_us=<n>`, then the `<name>_p90_us=<n>` of each.
It prints figures; it does not pass or fail on speed.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.settings import Settings
from harness.wire import vlaeval
from harness.wire.client import PolicyClient
from harness.wire.openpi import OpenpiConnection
from harness.wire.readyfile import wait_ready

BLOCK = 20  # round trips of one codec in a row
WARM = 3  # round trips before each block, not timed
STEP_S = 0.02  # the sim step's stand-in before each `*_after_step` round trip
SPEC = {"benchmark": "bench", "robot": "panda", "action_dim": 10, "cameras": ["a", "b", "c"]}


def serve(ready: str) -> None:
    from harness.model.policyload import load_policy
    from harness.model.server import ModelServer

    ModelServer(load_policy("hold"), ready, Settings.defaults()).serve_forever()


def serve_openpi(ready: str) -> None:
    from harness.model.openpi_server import OpenpiServer
    from harness.model.policyload import load_policy

    OpenpiServer(load_policy("hold"), ready, Settings.defaults()).serve_forever()


def serve_vla_eval(port: int) -> None:
    """vla-eval's own server around a `hold` model: the state repeated over a 30-step chunk."""
    from vla_eval.model_servers.predict import PredictModelServer
    from vla_eval.model_servers.serve import serve as vla_serve

    class Hold(PredictModelServer):
        def predict(self, obs: dict, ctx: Any) -> dict:
            return {"actions": np.tile(np.asarray(obs["state"], np.float32), (30, 1))}

    vla_serve(Hold(), host="127.0.0.1", port=port)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_vla_eval(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the vla-eval server on port {port} did not come up")


def observation() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    images = {cam: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for cam in SPEC["cameras"]}
    return {"images": images, "proprio": rng.standard_normal(10).astype(np.float32)}


Infer = Callable[[dict[str, Any], int], np.ndarray]


def native_client(ready: Path, name: str) -> tuple[Infer, Callable[[], None]]:
    """Our client: `msgpack` and `json` over the server's Unix socket, `msgpack_tcp` over TCP."""
    codec, unix = name.removesuffix("_tcp"), not name.endswith("_tcp")
    client = PolicyClient.from_ready_file(ready, timeout_s=60, codec=codec, unix=unix)
    client.hello(SPEC)
    assert client._codec.name == codec and (client._sock.family == socket.AF_UNIX) == unix
    client.reset("bench", "bench", "hold still", 0)
    return client.infer, client.close


def openpi_client(ready: Path) -> tuple[Infer, Callable[[], None]]:
    info = wait_ready(ready, 120)
    conn = OpenpiConnection(f"127.0.0.1:{info['port']}", attempts=30, timeout_s=60, max_size=1 << 26)
    return (lambda obs, step: conn.infer(obs)["actions"]), conn.close


def vla_eval_client(port: int) -> tuple[Infer, Callable[[], None]]:
    hello = vlaeval.hello_payload("wire-benchmark", "1")
    conn = vlaeval.VlaEvalConnection(f"127.0.0.1:{port}", hello, attempts=30, timeout_s=60, max_size=1 << 26)
    conn.start_episode({"task": {"name": "bench"}})

    def infer(obs: dict[str, Any], step: int) -> np.ndarray:
        return conn.act({"images": obs["images"], "state": obs["proprio"]})["actions"]

    return infer, conn.close


def measure(clients: dict[str, tuple[Infer, Callable[[], None]]], iters: int) -> dict[str, list[float]]:
    """µs of each infer round trip per protocol/codec (encode, send, server decode + policy + encode,
    receive, decode). They take turns in blocks of BLOCK round trips, so load from other processes
    hits all of them alike, while each block runs as a sim client does: one codec, warm (a round
    trip right after another codec's pays that codec's allocator churn: ~1 ms here)."""
    obs = observation()
    times: dict[str, list[float]] = {name: [] for name in clients}
    for block in range(-(-iters // BLOCK)):
        for name, (infer, _) in clients.items():
            for step in range(block * BLOCK - WARM, (block + 1) * BLOCK):
                start = time.perf_counter()
                chunk = infer(obs, step)
                if step >= block * BLOCK:
                    times[name].append((time.perf_counter() - start) * 1e6)
                assert chunk.shape == (30, 10)
    for _, close in clients.values():
        close()
    return times


def after_step(clients: dict[str, tuple[Infer, Callable[[], None]]], iters: int) -> dict[str, list[float]]:
    """µs of each round trip right after a sim step's stand-in: STEP_S of this core adding to an
    8 MB array (a renderer's worth of memory traffic) while the server waits in its blocking read.
    The clients take turns, one round trip each."""
    obs, scratch = observation(), np.zeros(8 << 20, np.uint8)
    times: dict[str, list[float]] = {f"{name}_after_step": [] for name in clients}
    for step in range(iters):
        for name, (infer, _) in clients.items():
            end = time.perf_counter() + STEP_S
            while time.perf_counter() < end:
                scratch += 1
            start = time.perf_counter()
            infer(obs, step)
            times[f"{name}_after_step"].append((time.perf_counter() - start) * 1e6)
    for _, close in clients.values():
        close()
    return times


def memcpy_client() -> tuple[Infer, Callable[[], None]]:
    """Not a round trip: one copy of the observation's arrays into a preallocated buffer."""
    arrays = [*observation()["images"].values(), observation()["proprio"]]
    buffer = np.empty(sum(a.nbytes for a in arrays), np.uint8)
    chunk = np.zeros((30, 10), np.float32)

    def infer(obs: dict[str, Any], step: int) -> np.ndarray:
        offset = 0
        for arr in (*obs["images"].values(), obs["proprio"]):
            buffer[offset : offset + arr.nbytes] = arr.reshape(-1).view(np.uint8)
            offset += arr.nbytes
        return chunk

    return infer, lambda: None


def placement(pin: bool) -> tuple[int | None, int | None]:
    """(this process's core, the servers' core): the first two this process may use, pinned now
    and said; (None, None) when not pinning or with one core."""
    cores = sorted(os.sched_getaffinity(0))
    if not pin or len(cores) < 2:
        print(f"placement: left to the kernel ({len(cores)} cores)")
        return None, None
    os.sched_setaffinity(0, {cores[0]})
    print(f"placement: this process (the clients) on core {cores[0]}, the servers on core {cores[1]}")
    return cores[0], cores[1]


def start(flag: list[str], env: dict[str, str], core: int | None) -> subprocess.Popen:
    """A server process of this script (`flag`: which), on `core` when given."""
    pin = None if core is None else lambda: os.sched_setaffinity(0, {core})
    return subprocess.Popen([sys.executable, __file__, *flag], env={**os.environ, **env}, preexec_fn=pin)


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--iters", type=int, default=200, help="round trips per codec (default 200; after a step: a quarter)"
    )
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false", help="leave each process's core to the kernel"
    )
    parser.add_argument("--serve", metavar="READY_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--serve-openpi", metavar="READY_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--serve-vla-eval", metavar="PORT", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve or args.serve_openpi or args.serve_vla_eval:
        logging.basicConfig(level=logging.WARNING)
        if args.serve_vla_eval:
            serve_vla_eval(args.serve_vla_eval)
        else:
            (serve if args.serve else serve_openpi)(args.serve or args.serve_openpi)
        return
    server_core = placement(args.pin)[1]
    with tempfile.TemporaryDirectory() as tmp:
        ready, openpi_ready, port = Path(tmp) / "ready.json", Path(tmp) / "openpi.json", free_port()
        servers = [
            start(["--serve", str(ready)], {}, server_core),
            start(["--serve-openpi", str(openpi_ready)], {}, server_core),
            start(["--serve-vla-eval", str(port)], {}, server_core),
        ]
        try:
            wait_vla_eval(port, servers[2])
            clients = {name: native_client(ready, name) for name in ("msgpack", "msgpack_tcp", "json")}
            clients["memcpy"] = memcpy_client()
            clients["openpi"] = openpi_client(openpi_ready)
            clients["vla_eval"] = vla_eval_client(port)
            results = measure(clients, args.iters)
            results |= after_step({"msgpack": native_client(ready, "msgpack")}, max(2, args.iters // 4))
        finally:
            for server in servers:
                server.terminate()
                server.wait(30)
    for name, us in results.items():
        print(f"{name:>18}: median {statistics.median(us):8.0f} µs, p90 {p90(us):8.0f} µs per round trip")
    medians = " ".join(f"{name}_rt_us={statistics.median(us):.0f}" for name, us in results.items())
    print(medians + " " + " ".join(f"{name}_p90_us={p90(us):.0f}" for name, us in results.items()))


if __name__ == "__main__":
    main()
