"""Same-host shared memory for the wire: one memfd per direction of a connection, offered in the hello.

Why memfds, reopened through /proc: a memfd has no name in any filesystem, so nothing can leak when
either side is SIGKILLed; the kernel frees it with its last descriptor and mapping. The client
creates both regions (the request region it writes, the reply region the server writes), names
them with a fresh random nonce, seals them against shrinking (so no mapping can ever fault with
SIGBUS under a peer that truncates) and offers `{pid, request_fd, reply_fd, nonce}` in the hello. A
server on the same host opens `/proc/<pid>/fd/<fd>`, which the kernel allows only to a process that
could read the client's memory anyway (same user, same pid namespace), and keeps the region only
if what it opened is a memfd named with that nonce, sealed and within the frame limit; anything
else is a refusal with its reason, and the connection keeps a socket codec. This works over the
TCP connection both ends already have: no second socket, no SCM_RIGHTS.

A region's writer grows it (ftruncate, then a fresh mapping) when a message does not fit; its
reader maps the new size when a frame points beyond what it has mapped. A region's first
TABLE_BYTES hold its writer's release table: which of the frames the writer's peer lent it (read
as views, `harness.wire.lent`) it views no more. What travels through a region, and the sequence
numbers that guard it, is `harness.wire.shmcodec`'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import mmap
import os
import re
import secrets
import socket
import struct
from typing import TYPE_CHECKING, Any

from harness.wire.errors import WireError

if TYPE_CHECKING:  # numpy only for the annotation: the node script imports this module before any env
    import numpy as np

SHM_CODEC = "shm"  # the codec name a client lists first in its hello when it offers shared memory
SHM_MODES = ("auto", "0", "1")  # WIRE_SHM: same-host only, never, always (and required)
INITIAL_SIZE = 1 << 20  # a region's first size; memfd pages cost memory only once written
_NAME = "harness-wire-{nonce}-{role}"
_NONCE = re.compile(r"[0-9a-f]{32}")
_SEQ = struct.Struct("<Q")  # a frame's sequence number: its stamp, or a release table entry
RELEASES = 64  # release table entries: frame n's release is noted in entry n % RELEASES
TABLE_BYTES = RELEASES * _SEQ.size  # the table, at the start of every region; frames come after it


class Region:
    """One direction's shared buffer, mapped in this process; only its writer may grow it."""

    def __init__(self, fd: int, writable: bool, what: str) -> None:
        self.fd = fd
        self.writable = writable
        self.what = what
        self.size = 0
        self._map: mmap.mmap | None = None
        try:
            self._remap(os.fstat(fd).st_size)
        except BaseException:
            os.close(fd)
            raise

    def _remap(self, size: int) -> None:
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if self.writable else 0)
        self._unmap()
        self._map = mmap.mmap(self.fd, size, mmap.MAP_SHARED, prot)
        self.size = size

    def _unmap(self) -> None:
        """Drop this mapping: at once, or, while arrays still view it (`view`), with the last of them."""
        if self._map is not None:
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None

    def grow(self, needed: int, limit: int) -> None:
        """Writer: make room for `needed` bytes (doubling), never past `limit` (WIRE_MAX_FRAME)."""
        if needed <= self.size:
            return
        if needed > limit:
            raise WireError(
                f"a message of {needed} bytes exceeds the limit of {limit} bytes (WIRE_MAX_FRAME)"
            )
        size = min(limit, max(needed, 2 * self.size))
        try:
            os.ftruncate(self.fd, size)
        except OSError as exc:
            raise WireError(f"cannot grow the {self.what} region to {size} bytes: {exc}") from None
        self._remap(size)

    def cover(self, end: int, limit: int) -> None:
        """Reader: map up to byte `end`, which the writer says it wrote; refused past `limit`."""
        if end <= self.size:
            return
        actual = os.fstat(self.fd).st_size
        if end > min(actual, limit):
            raise WireError(
                f"shared-memory frame points at byte {end} of the {self.what} region, which holds "
                f"{actual} bytes (limit {limit})"
            )
        self._remap(actual if actual <= limit else end)

    def write(self, offset: int, data: np.ndarray, nbytes: int) -> None:
        """The `nbytes` bytes of a C-contiguous array, copied straight from its buffer."""
        self._mapped()[offset : offset + nbytes] = data

    def read(self, offset: int, nbytes: int) -> bytes:
        """A copy of the bytes: the writer reuses its region for the next frame."""
        return self._mapped()[offset : offset + nbytes]

    def view(self, offset: int, nbytes: int) -> np.ndarray:
        """The bytes as a uint8 array over the mapping, no copy: the mapping lives while it does."""
        import numpy as np

        return np.frombuffer(self._mapped(), np.uint8, nbytes, offset)

    def stamp(self, offset: int) -> int:
        """The sequence number stamped at a frame's start."""
        return _SEQ.unpack_from(self._mapped(), offset)[0]

    def set_stamp(self, offset: int, seq: int) -> None:
        _SEQ.pack_into(self._mapped(), offset, seq)

    def note_release(self, seq: int) -> None:
        """Writer of this region, as reader of the other: the frame `seq` it was lent is viewed no
        more. Called by a finalizer in whichever thread dropped the last view; a closed region
        (the connection is gone) takes no note."""
        mapped = self._map
        if mapped is not None:
            with contextlib.suppress(ValueError):  # closed by another thread meanwhile
                _SEQ.pack_into(mapped, seq % RELEASES * _SEQ.size, seq)

    def released(self, seq: int) -> bool:
        """Reader of this region: whether its writer noted the frame `seq` it was lent as released."""
        return _SEQ.unpack_from(self._mapped(), seq % RELEASES * _SEQ.size)[0] == seq

    def _mapped(self) -> mmap.mmap:
        if self._map is None:
            raise WireError(f"the {self.what} region is closed")
        return self._map

    def close(self) -> None:
        """Unmap and close; idempotent (the kernel frees the memfd once both ends did, or died)."""
        if self.fd < 0:
            return
        self._unmap()
        os.close(self.fd)
        self.fd = -1


class Offer:
    """The client's two fresh regions and the hello field that names them to the server."""

    def __init__(self) -> None:
        nonce = secrets.token_hex(16)
        self.request = Region(_new_memfd(_NAME.format(nonce=nonce, role="request")), True, "request")
        try:
            self.reply = Region(_new_memfd(_NAME.format(nonce=nonce, role="reply")), False, "reply")
        except BaseException:
            self.request.close()
            raise
        self.field = {
            "pid": os.getpid(),
            "request_fd": self.request.fd,
            "reply_fd": self.reply.fd,
            "nonce": nonce,
        }

    def close(self) -> None:
        self.request.close()
        self.reply.close()


def _new_memfd(name: str) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, INITIAL_SIZE)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    except OSError:
        os.close(fd)
        raise
    return fd


def accept_offer(field: Any, limit: int) -> tuple[Region, Region]:
    """Server: (request region to read, reply region to write) from a hello's `shm` field.

    Raises WireError saying why not: a malformed field, a client this server cannot reach (another
    host, pid namespace or user), or a descriptor that is not the memfd the nonce names.
    """
    if not isinstance(field, dict) or not all(
        type(field.get(key)) is int for key in ("pid", "request_fd", "reply_fd")
    ):
        raise WireError(f"hello field 'shm' must hold integer pid, request_fd, reply_fd; got {field!r:.120}")
    nonce = field.get("nonce")
    if not isinstance(nonce, str) or not _NONCE.fullmatch(nonce):
        raise WireError("hello field 'shm': nonce must be 32 lowercase hex digits")
    request = _open_client_memfd(field["pid"], field["request_fd"], nonce, "request", limit)
    try:
        reply = _open_client_memfd(field["pid"], field["reply_fd"], nonce, "reply", limit)
    except WireError:
        request.close()
        raise
    return request, reply


def _open_client_memfd(pid: int, fd: int, nonce: str, role: str, limit: int) -> Region:
    path = f"/proc/{pid}/fd/{fd}"
    expected = f"/memfd:{_NAME.format(nonce=nonce, role=role)} (deleted)"
    _check_link(path, expected)  # before opening: never open someone's pipe or device by mistake
    flags = (os.O_RDONLY if role == "request" else os.O_RDWR) | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        mine = os.open(path, flags)
    except OSError as exc:
        raise WireError(f"cannot open the client's {role} region {path}: {exc.strerror}") from None
    try:
        _check_link(f"/proc/self/fd/{mine}", expected)  # what was opened, not what was looked at
        seals = fcntl.fcntl(mine, fcntl.F_GET_SEALS)
        size = os.fstat(mine).st_size
        if not seals & fcntl.F_SEAL_SHRINK:
            raise WireError(f"the client's {role} region is not sealed against shrinking")
        if not 0 < size <= limit:
            raise WireError(f"the client's {role} region holds {size} bytes (limit {limit})")
        return Region(mine, writable=role == "reply", what=role)
    except BaseException:
        os.close(mine)
        raise


def _check_link(path: str, expected: str) -> None:
    try:
        target = os.readlink(path)
    except OSError as exc:
        raise WireError(f"cannot see the client's shared memory at {path}: {exc.strerror}") from None
    if target != expected:
        raise WireError(f"{path} is not this connection's shared memory")


def same_host(sock: socket.socket) -> bool:
    """Whether the peer of `sock` is this host: a Unix socket, a loopback address, or an address
    the connection also has at this end (a host dialling its own interface address)."""
    if sock.family == socket.AF_UNIX:
        return True
    try:
        peer, local = sock.getpeername()[0], sock.getsockname()[0]
    except OSError:
        return False
    try:
        address = ipaddress.ip_address(peer.partition("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return peer == local or address.is_loopback or bool(mapped and mapped.is_loopback)
