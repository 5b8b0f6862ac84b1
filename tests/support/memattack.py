"""The memory attacks of issues 26 and 63: N greeted clients at once, each sending one big frame (a
msgpack infer whose observation carries one huge uint8 array, or one array of millions of one-byte
items that decode into objects of 28-64 bytes each), while the model server's RSS is sampled from
/proc; shared by the memory tests and benchmarks/server_memory.py.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from harness.wire.codecs import JsonCodec, MsgpackCodec
from harness.wire.readyfile import read_ready

MiB = 1 << 20
SPEC = {"benchmark": "test", "robot": "panda", "action_dim": 10, "cameras": ["base_camera"]}


def rss(pid: int) -> int:
    """VmRSS of `pid` in bytes (0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """Samples a process's RSS every `every_s` in a thread; `peak` is the largest seen."""

    def __init__(self, pid: int, every_s: float = 0.005) -> None:
        self.pid, self.every_s = pid, every_s
        self.peak = rss(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, rss(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(min(n - len(data), 1 << 16))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _recv_msg(sock: socket.socket, codec: Any) -> dict[str, Any] | None:
    header = _recv_exact(sock, 4)
    if header is None:
        return None
    body = _recv_exact(sock, struct.unpack(">I", header)[0])
    return None if body is None else codec.decode(body)


def big_infer(frame_bytes: int) -> bytes:
    """A msgpack infer body of about `frame_bytes` bytes (never more)."""
    pad = np.zeros(frame_bytes - 4096, np.uint8)
    obs = {"images": {"base_camera": np.zeros((8, 8, 3), np.uint8)}, "proprio": np.zeros(10, np.float32)}
    return MsgpackCodec().encode({"type": "infer", "step": 0, "obs": {**obs, "pad": pad}})


AMPLIFYING = {"small ints": b"\x00", "empty maps": b"\x80", "empty arrays": b"\x90"}


def amplifying_infer(item: bytes, frame_bytes: int) -> bytes:
    """A msgpack infer of about `frame_bytes` bytes whose observation is one array of one-byte
    `item`s (AMPLIFYING's)."""
    head = b"".join(msgpack.packb(v) for v in ("type", "infer", "step", 0, "obs"))
    n = frame_bytes - len(head) - 16
    return b"\x83" + head + b"\x81" + msgpack.packb("x") + b"\xdd" + struct.pack(">I", n) + item * n


@dataclass
class AttackResult:
    replies: list[str]  # per client: "infer", "error: <message>", or "closed"


def attack(
    ready: Path, clients: int, frame_bytes: int, spec: dict[str, Any] | None = None, item: bytes | None = None
) -> AttackResult:
    """`clients` connections say hello (msgpack) and reset, then all send their big frame at once
    (`big_infer`'s, or with `item` `amplifying_infer`'s) and read one reply each; all are closed
    when this returns."""
    info = read_ready(ready)
    body = big_infer(frame_bytes) if item is None else amplifying_infer(item, frame_bytes)
    hello = {"type": "hello", "version": 1, "codecs": ["msgpack"], "spec": spec or SPEC}
    reset = {"type": "reset", "task": "t", "task_config": "c", "instruction": "i", "seed": 0}
    socks = []
    replies: list[str] = ["closed"] * clients
    try:
        for _ in range(clients):
            sock = socket.create_connection((info["host"], info["port"]), timeout=120)
            socks.append(sock)
            sock.sendall(_frame(JsonCodec().encode(hello)))
            assert (_recv_msg(sock, JsonCodec()) or {}).get("type") == "hello"
            sock.sendall(_frame(MsgpackCodec().encode(reset)))
            assert (_recv_msg(sock, MsgpackCodec()) or {}).get("type") == "reset"
        go = threading.Barrier(clients)

        def one(i: int) -> None:
            go.wait()
            try:
                socks[i].sendall(_frame(body))
                reply = _recv_msg(socks[i], MsgpackCodec())
            except OSError:
                return
            if reply is not None:
                kind = reply.get("type", "?")
                replies[i] = f"error: {reply.get('message')}" if kind == "error" else kind

        threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for sock in socks:
            sock.close()
    return AttackResult(replies)


def settle(pid: int, target: int, timeout_s: float) -> int:
    """Poll RSS until it is at most `target` or `timeout_s` passed; the last value seen."""
    deadline = time.monotonic() + timeout_s
    value = rss(pid)
    while value > target and time.monotonic() < deadline:
        time.sleep(0.2)
        value = rss(pid)
    return value
