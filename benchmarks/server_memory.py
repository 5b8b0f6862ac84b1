"""Model server memory under the issue-26 attack: N greeted clients each send one ~64 MiB msgpack frame;
with `--hostile`, issue 63's: 16 MiB frames of one-byte items (small ints, empty maps, empty arrays).

The server (`hold` policy, loopback, no token) runs in its own process; its RSS is sampled from
/proc/<pid>/status every 5 ms while the clients send, and again after they left (the lowest value
within `--settle` seconds). For each client count it prints the growth of the peak and of the
settled RSS over the RSS before the attack, and what the clients were answered; the last line is
`clients=<n> peak_mb=<growth> after_mb=<growth>` for the largest count. With `--hostile`, a bystander
session pings the server every 5 ms throughout, and each shape and count prints the peak growth as a
multiple of the frames sent and the bystander's longest wait; the last line is `worst_peak_ratio=<r>
worst_wait_s=<s>` over all of them. It prints figures; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from harness.wire.readyfile import wait_ready  # noqa: E402
from support.memattack import AMPLIFYING, MiB, RssSampler, attack, rss  # noqa: E402
from support.wirekit import SPEC, client  # noqa: E402


def lowest_rss(pid: int, seconds: float) -> int:
    low, deadline = rss(pid), time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.1)
        low = min(low, rss(pid))
    return low


def start_server(python: str, ready: Path) -> subprocess.Popen:
    """A model server serving `hold` in its own process, ready."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVAL_ROOT": str(ROOT)}
    cmd = [python, str(ROOT / "scripts" / "policy_model_server.py"), "--policy", "hold",
           "--ready-file", str(ready), "--log-level", "WARNING"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    wait_ready(ready, 120)
    time.sleep(0.5)
    return proc


class Bystander:
    """Another session that pings every 5 ms while an attack runs; `worst()` is its longest wait."""

    def __init__(self, ready: Path) -> None:
        self.conn = client(ready)
        self.conn.hello(SPEC)
        self.waits: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            started = time.perf_counter()
            self.conn.ping()
            self.waits.append(time.perf_counter() - started)
            time.sleep(0.005)

    def worst(self) -> float:
        self.done.set()
        self.thread.join(60)
        self.conn.close()
        return max(self.waits)


def hostile(ready: Path, pid: int, clients: list[int]) -> str:
    """Issue 63's shapes, 16 MiB frames from each of `clients` at once, one after another."""
    frame, worst_ratio, worst_wait = 16 * MiB, 0.0, 0.0
    attack(ready, 1, MiB)  # warm up
    for k in clients:
        for name, item in AMPLIFYING.items():
            base = rss(pid)
            bystander, sampler = Bystander(ready), RssSampler(pid)
            replies = attack(ready, k, frame, item=item).replies
            peak, wait = sampler.stop(), bystander.worst()
            ratio = (peak - base) / (k * frame)
            worst_ratio, worst_wait = max(worst_ratio, ratio), max(worst_wait, wait)
            answers = ", ".join(f"{n}x {kind[:60]}" for kind, n in collections.Counter(replies).items())
            print(f"{k} x 16 MiB of {name}: peak +{(peak - base) / 1e6:.0f} MB ({ratio:.2f}x the frames), "
                  f"bystander's longest wait {wait * 1000:.0f} ms; answers: {answers}")  # fmt: skip
    return f"worst_peak_ratio={worst_ratio:.2f} worst_wait_s={worst_wait:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", default="1,4,8", help="comma-separated client counts, one server each")
    p.add_argument("--frame-mb", type=int, default=64, help="frame size in MiB (at most WIRE_MAX_FRAME)")
    p.add_argument("--settle", type=float, default=5.0, help="seconds to watch RSS after the clients left")
    p.add_argument("--hostile", action="store_true", help="issue 63's frames of one-byte items, one server")
    args = p.parse_args()
    python = os.environ.get("MODEL_PY") or sys.executable
    frame = min(args.frame_mb * MiB, 64 * MiB)
    counts = [int(c) for c in args.clients.split(",")]
    if args.hostile:
        with tempfile.TemporaryDirectory() as tmp:
            ready = Path(tmp) / "ready.json"
            proc = start_server(python, ready)
            try:
                print(hostile(ready, proc.pid, counts))
            finally:
                proc.terminate()
                proc.wait(20)
        return
    line = ""
    for clients in counts:
        with tempfile.TemporaryDirectory() as tmp:
            ready = Path(tmp) / "ready.json"
            proc = start_server(python, ready)
            try:
                base = rss(proc.pid)
                sampler = RssSampler(proc.pid)
                result = attack(ready, clients, frame)
                peak = sampler.stop()
                after = lowest_rss(proc.pid, args.settle)
            finally:
                proc.terminate()
                proc.wait(20)
        answers = ", ".join(f"{n}x {kind[:90]}" for kind, n in collections.Counter(result.replies).items())
        grew, kept = (peak - base) / 1e6, (after - base) / 1e6
        print(f"{clients} clients x {frame / MiB:.0f} MiB: base {base / 1e6:.0f} MB, "
              f"peak +{grew:.0f} MB, after +{kept:.0f} MB; answers: {answers}")  # fmt: skip
        line = f"clients={clients} peak_mb={grew:.0f} after_mb={kept:.0f}"
    print(line)


if __name__ == "__main__":
    main()
