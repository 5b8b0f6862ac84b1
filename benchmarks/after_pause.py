"""What an idle spell costs the work that follows it, in one process: is the wire's climb ours?

`benchmarks/wire.py` finds a shared-memory round trip slower in its blocks (each after a pause, the
other codecs' blocks) than back to back, and slower still after a sim step's stand-in. This script
asks whether that is the transport (its socket, its threads, two processes seeing each other's
frames) or the machine: it runs, on one core and in this process alone, three pieces of work in
bursts of `--burst` calls, each burst after a pause, and prints the median time of the burst's
1st, 2nd, 3rd … call over `--rounds` bursts:
- `codec`: both ends of the `shm` codec, no socket (wire.py's `shm_codec`: the 441 KB observation
  copied into a region and viewed, the chunk copied back);
- `memcpy`: the observation's arrays copied into a buffer (wire.py's floor, the same bytes touched);
- `loop`: a pure-Python loop of about the same length that touches no memory to speak of.
The pauses: `sleep` (the core idles, as a server's core does through a sim step), `busy` (the
same time spent spinning in Python: the core stays busy), `none`.
It prints figures; it does not pass or fail on speed.

Last line: `<work>_<pause>_first_us=<n> <work>_<pause>_second_us=<n> <work>_<pause>_tenth_us=<n>
<work>_<pause>_last_us=<n> …` for each work and pause.

Example (about 7 seconds here):
  $SIM_PY benchmarks/after_pause.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.wire import Infer, memcpy_client, observation, shm_codec_client  # noqa: E402

SHOWN = (0, 1, 2, 3, 4, 9, 19, 39)  # the calls of a burst printed (0-based: the 1st … 40th), and the last


def python_loop(obs: object, step: int) -> None:
    """Plain Python, ~the codec's length here, on a few objects: no memory to bring back."""
    total = 0
    for k in range(1600):
        total += k


def pause(kind: str, seconds: float) -> None:
    if kind == "sleep":
        time.sleep(seconds)
    elif kind == "busy":
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass


def bursts(work: Infer | Callable[[object, int], None], kind: str, args: argparse.Namespace) -> list[float]:
    """The median µs of each call position over `args.rounds` bursts, each after a pause of `kind`."""
    obs = observation()
    rows = []
    for _ in range(args.rounds):
        pause(kind, args.pause_ms / 1e3)
        row = []
        for step in range(args.burst):
            start = time.perf_counter()
            work(obs, step)
            row.append((time.perf_counter() - start) * 1e6)
        rows.append(row)
    return [statistics.median(call) for call in zip(*rows, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pause-ms", type=float, default=30.0, help="each pause (default 30 ms)")
    parser.add_argument("--burst", type=int, default=100, help="calls after each pause (default 100)")
    parser.add_argument("--rounds", type=int, default=30, help="bursts per work and pause (default 30)")
    args = parser.parse_args()
    if args.burst <= max(SHOWN):
        parser.error(f"--burst {args.burst}: at least {max(SHOWN) + 1} calls, the positions shown")
    core = sorted(os.sched_getaffinity(0))[-1]
    os.sched_setaffinity(0, {core})
    codec, close = shm_codec_client()
    works = {"codec": codec, "memcpy": memcpy_client()[0], "loop": python_loop}
    figures = []
    print(f"on core {core}; pause {args.pause_ms:g} ms, {args.burst} calls a burst, {args.rounds} bursts; "
          f"median µs of the burst's call number:")  # fmt: skip
    print(f"{'':14}" + "".join(f"{n + 1:>7}" for n in SHOWN) + f"{'last':>7}")
    try:
        for name, work in works.items():
            for _ in range(args.burst):  # warm: the first calls of a process are slower
                work(observation(), 0)
            for kind in ("none", "busy", "sleep"):
                medians = bursts(work, kind, args)
                shown = [medians[n] for n in SHOWN] + [medians[-1]]
                print(f"{name + ' ' + kind:14}" + "".join(f"{us:7.0f}" for us in shown), flush=True)
                picked = {"first": medians[0], "second": medians[1], "tenth": medians[9], "last": medians[-1]}
                figures += [f"{name}_{kind}_{label}_us={us:.0f}" for label, us in picked.items()]
    finally:
        close()
    print(" ".join(figures))


if __name__ == "__main__":
    main()
