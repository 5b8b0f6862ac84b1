"""Model server memory under the issue-26 attack: N greeted clients each send one ~64 MiB msgpack frame.

The server (`hold` policy, loopback, no token) runs in its own process; its RSS is sampled from
/proc/<pid>/status every 5 ms while the clients send, and again after they left (the lowest value
within `--settle` seconds). For each client count it prints the growth of the peak and of the
settled RSS over the RSS before the attack, and what the clients were answered; the last line is
`clients=<n> peak_mb=<growth> after_mb=<growth>` for the largest count. It prints figures; it does
not pass or fail.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from harness.wire.readyfile import wait_ready  # noqa: E402
from support.memattack import MiB, RssSampler, attack, rss  # noqa: E402


def lowest_rss(pid: int, seconds: float) -> int:
    low, deadline = rss(pid), time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.1)
        low = min(low, rss(pid))
    return low


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", default="1,4,8", help="comma-separated client counts, one server each")
    p.add_argument("--frame-mb", type=int, default=64, help="frame size in MiB (at most WIRE_MAX_FRAME)")
    p.add_argument("--settle", type=float, default=5.0, help="seconds to watch RSS after the clients left")
    args = p.parse_args()
    python = os.environ.get("MODEL_PY") or sys.executable
    frame = min(args.frame_mb * MiB, 64 * MiB)
    line = ""
    for clients in [int(c) for c in args.clients.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            ready = Path(tmp) / "ready.json"
            env = {**os.environ, "PYTHONPATH": str(ROOT), "EVAL_ROOT": str(ROOT)}
            cmd = [python, str(ROOT / "scripts" / "policy_model_server.py"), "--policy", "hold",
                   "--ready-file", str(ready), "--log-level", "WARNING"]  # fmt: skip
            proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
            try:
                wait_ready(ready, 120)
                time.sleep(0.5)
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
