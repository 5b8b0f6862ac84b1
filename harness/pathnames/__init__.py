"""How a name becomes one path component: the unit keys of the lease queue, and the result dirs,
seed banks and marker files of a run, encode names the same way.

A task may be a whole sentence with quotes or slashes (LIBERO's), so names go into paths through
`path_part`: a reversible percent-encoding that keeps the name readable and never lets two names
collide. This package imports nothing of the harness: the queue and the configuration both use it.
"""

from __future__ import annotations

import re
import string

_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_PATH_SAFE = frozenset(string.ascii_letters + string.digits + "._ -")


def safe_key(text: str) -> str:
    """A file-name-safe rendering of `text` (record file writer ids)."""
    return _KEY_UNSAFE.sub("-", text)


def path_part(name: str) -> str:
    """`name` as one path component, reversibly (`urllib.parse.unquote` gives it back): every character
    outside [A-Za-z0-9._ -], and a leading '.', percent-encoded as UTF-8 bytes. Identity for the
    plain names (ManiSkill's tasks), so their paths and keys are what they always were."""
    encoded = "".join(c if c in _PATH_SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in name)
    return "%2E" + encoded[1:] if encoded.startswith(".") else encoded
