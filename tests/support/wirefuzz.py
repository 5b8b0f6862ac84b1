"""A seeded wire fuzzer for the hostile-client tests: frames a model server must survive."""

from __future__ import annotations

import contextlib
import json
import random
import socket
import struct
from typing import Any

import msgpack
import numpy as np

from harness.config.knobs import DEFAULT_MAX_FRAME
from harness.wire.codecs import JsonCodec, MsgpackCodec
from support.wirekit import SPEC, exact_bytes, hello_body


class WireFuzzer:
    """Seeded hostile frames against a server, one connection at a time (a new one once dropped).

    Mixes random bytes, truncated frames, oversize headers, fields of the wrong type, bad hellos
    and codecs, bad arrays, JSON/msgpack garbage and good requests. Every whole frame must be
    answered (a reply or a close) within the socket timeout, else the TimeoutError fails the
    test; on a token server nothing but an error may come back before a hello with the token.
    """

    def __init__(self, address: tuple[str, int], token: str | None, seed: str, hello_limit: int) -> None:
        self.address, self.token, self.rng = address, token, random.Random(seed)
        self.limits = (hello_limit, DEFAULT_MAX_FRAME)
        self.sock: socket.socket | None = None
        self.greeted, self.codec = False, "json"

    def run(self, frames: int) -> None:
        for _ in range(frames):
            if self.sock is None:
                self.connect()
            try:
                self.step()
            except ConnectionError:  # reset by the server while we still talked: dropped
                self.close()
        self.close()

    def connect(self) -> None:
        self.sock = socket.create_connection(self.address, timeout=5)
        self.greeted, self.codec = False, "json"
        if self.rng.random() < 0.7:
            reply = self.frame(hello_body([self.rng.choice(["msgpack", "json"])], self.token))
            assert reply is not None and reply["type"] == "hello", reply

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None

    def step(self) -> None:
        rng, case = self.rng, self.rng.randrange(9)
        if case == 0:  # random bytes, no framing at all
            self.drain(rng.randbytes(rng.randrange(1, 64)))
        elif case == 1:  # a truncated frame, then the peer leaves
            body = self.encode(self.request())
            self.drain(struct.pack(">I", len(body) + rng.randrange(1, 1 << 21)) + body)
        elif case == 2:  # an oversize header: an error, then a drop
            limit = self.limits[self.greeted]
            self.sock.sendall(struct.pack(">I", rng.choice([limit + 1, limit + rng.randrange(1, 1 << 20)])))
            reply = self.reply()
            assert reply is None or reply["type"] == "error", reply
            self.drain(b"")
        else:
            make = [self.garbage, self.wrong_type, self.bad_hello, self.bad_array]
            body = make[case - 3]() if case < 7 else self.encode(self.request())
            if self.frame(body) is None:
                self.close()

    def frame(self, body: bytes) -> dict[str, Any] | None:
        """Send one whole frame; the reply, or None when the server closed the connection."""
        authentic = (
            self.token is not None and body.startswith(b'{"type": "hello"') and self.token in str(body)
        )
        self.sock.sendall(struct.pack(">I", len(body)) + body)
        reply = self.reply()
        if reply is None:
            return None
        assert isinstance(reply, dict) and "type" in reply, reply
        if self.token and not self.greeted and not authentic:
            assert reply["type"] == "error", (body[:200], reply)
        if reply["type"] == "hello":
            self.greeted, self.codec = True, reply["codec"]
        return reply

    def reply(self) -> dict[str, Any] | None:
        header = exact_bytes(self.sock, 4)
        body = None if header is None else exact_bytes(self.sock, struct.unpack(">I", header)[0])
        if body is None:
            return None
        return (MsgpackCodec() if self.codec == "msgpack" else JsonCodec()).decode(body)

    def drain(self, raw: bytes) -> None:
        """Send bytes that make no whole frame, half-close, wait for the server to close."""
        self.sock.sendall(raw)
        with contextlib.suppress(OSError):  # already gone
            self.sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(ConnectionError):
            while self.sock.recv(65536):
                pass
        self.close()

    def encode(self, msg: Any) -> bytes:
        return msgpack.packb(msg, use_bin_type=True) if self.codec == "msgpack" else json.dumps(msg).encode()

    def request(self) -> dict[str, Any]:
        rng = self.rng
        kind = rng.choice(["reset", "infer", "ping"])
        if kind == "reset":
            return {
                "type": "reset",
                "task": "t",
                "task_config": "c",
                "instruction": "i",
                "seed": rng.randrange(9),
            }
        if kind == "ping":
            return {"type": "ping"}
        proprio = np.full(rng.choice([10, 10, 3, 0]), rng.random(), np.float32)
        wire = json.loads(JsonCodec().encode({"a": proprio}))["a"]
        if self.codec == "msgpack":
            wire["__ndarray__"] = proprio.tobytes()
        return {"type": "infer", "step": rng.randrange(50), "obs": {"proprio": wire}}

    def value(self) -> Any:
        huge = 2**64 - 1 if self.codec == "msgpack" else 2**70  # msgpack ints stop at 64 bits
        text = "x" * self.rng.randrange(300)
        return self.rng.choice([None, True, 3, -1, huge, 1.5, text, [], ["a"], {"k": [1]}, [[1]], {}])

    def garbage(self) -> bytes:
        rng = self.rng
        return rng.choice(
            [
                lambda: rng.randbytes(rng.randrange(200)),
                lambda: b"[" * rng.randrange(1, 200_000),
                lambda: b"\x91" * rng.randrange(1, 200_000) + b"\xc0",
                lambda: b'{"type": "infer", "step": 1, "obs": {"a": NaN, "b": ' + rng.randbytes(20) + b"}}",
                lambda: msgpack.packb({"type": "ping", "x": msgpack.ExtType(rng.randrange(128), b"zz")}),
                lambda: msgpack.packb([1, 2, 3]),
                lambda: b"null",
                lambda: b"",
            ]
        )()

    def wrong_type(self) -> bytes:
        msg = self.request()
        msg[self.rng.choice(sorted(msg))] = self.value()
        return self.encode(msg)

    def bad_hello(self) -> bytes:
        rng = self.rng
        msg = json.loads(hello_body(["json"], self.token if rng.random() < 0.5 else "nope"))
        field = rng.choice(["codecs", "version", "spec", "token", "spec.cameras", "spec.image_size"])
        if field.startswith("spec."):
            msg["spec"] = {**SPEC, field[5:]: self.value()}
        else:
            msg[field] = rng.choice([self.value(), [self.value(), self.value()], ["pickle"]])
        return json.dumps(msg).encode()

    def bad_array(self) -> bytes:
        rng = self.rng
        data: Any = rng.choice([b"\0" * 4, b"\0" * 3, "AAAA"]) if self.codec == "msgpack" else "AAAAAA=="
        arr = {"__ndarray__": data, "dtype": "float32", "shape": [1]}
        key = rng.choice(["__ndarray__", "dtype", "shape", "extra", "drop"])
        if key == "drop":
            del arr[rng.choice(sorted(arr))]
        elif key == "extra":
            arr["extra"] = 1
        else:
            arr[key] = rng.choice(
                {
                    "__ndarray__": ["!!!", "A", 5, None, "AAAA" * 3],
                    "dtype": ["O", "V8", "<U3", "complex64", "float128", 7, "M8[s]", "float32,int8"],
                    "shape": [[-1], [2**40], [2**31, 2**31], "3", [1.5], [[1]], None, [0, -4]],
                }[key]
            )
        return self.encode({"type": "infer", "step": 0, "obs": {"proprio": arr}})
