"""Make a copied Python venv run from its new path, and install the simulator pin into it.

Why: a venv hard-codes its own absolute path in console-script shebangs (`bin/pip`), the activate
scripts and `pyvenv.cfg`'s `command`; `bin/python` itself finds its prefix from `pyvenv.cfg` next to
it. After a copy those point back at the shared tree, so `pip` in the copy would install into the
shared env. SIM_PIN is installed offline from a wheelhouse into the node-local copy only, then the
import is checked, so the version recorded with every episode is the one that really ran.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.node.staging import StagingError

_TEXT_LIMIT = 1 << 20


def is_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file() and (path / "bin" / "python").exists()


def relocate(venv: Path, old: Path) -> int:
    """Rewrite every mention of `old` (the source venv path) and of the path the venv was created at
    (pyvenv.cfg's `command`) in bin/ scripts and pyvenv.cfg to the venv's own path.

    Returns how many files changed.
    """
    olds = sorted({str(old), *_created_at(venv)} - {str(venv)}, key=len, reverse=True)
    targets = [venv / "pyvenv.cfg", *sorted((venv / "bin").iterdir())]
    changed = 0
    for path in targets:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _TEXT_LIMIT:
            continue
        data = path.read_bytes()
        if b"\0" in data or not any(o.encode() in data for o in olds):
            continue
        mode = path.stat().st_mode
        for o in olds:
            data = data.replace(o.encode(), str(venv).encode())
        path.write_bytes(data)
        os.chmod(path, mode)
        changed += 1
    return changed


def _created_at(venv: Path) -> set[str]:
    """The path the venv was created at, from pyvenv.cfg's `command = ... -m venv <path>` line."""
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "command" and " -m venv " in value:
            return {value.split(" -m venv ", 1)[1].strip().split()[-1]}
    return set()


def parse_pin(pin: str) -> tuple[str, str, list[str]]:
    """`name==version [companion ...]` → (name, version, all requirements); else a clear error.

    Companions are requirements the pinned build needs beside it (sapien 3.0.2 imports pkg_resources,
    so it needs `setuptools<81`); they come from the same wheelhouse.
    """
    reqs = pin.split()
    name, sep, version = reqs[0].partition("==") if reqs else ("", "", "")
    if not sep or not name or not version or any(c in version for c in "<>=!~,;"):
        raise StagingError(
            f"SIM_PIN={pin!r}: expected 'package==version [companion ...]', e.g. sapien==3.0.2"
        )
    return name, version, reqs


def install_pin(venv: Path, pin: str, wheelhouse: Path) -> str:
    """Install `pin` into `venv` from `wheelhouse` only (no index, no pip config), verify, return version."""
    name, version, reqs = parse_pin(pin)
    if not wheelhouse.is_dir():
        raise StagingError(f"SIM_PIN={pin}: wheelhouse {wheelhouse} does not exist")
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    for key in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        env.pop(key, None)
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index"]
    cmd += ["--find-links", str(wheelhouse), *reqs]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        reason = lines[-1] if lines else f"pip exit {done.returncode}"
        raise StagingError(f"SIM_PIN={pin} cannot be satisfied from wheelhouse {wheelhouse}: {reason}")
    found = installed_version(venv, name)
    if found != version:
        raise StagingError(f"SIM_PIN={pin}: after install, {venv} imports {name} {found}")
    return found


def installed_version(venv: Path, module: str) -> str:
    """The version that `import module` reports in `venv` (its __version__, else its dist metadata)."""
    code = (
        "import importlib, importlib.metadata as md, sys\n"
        "n = sys.argv[1]\n"
        "m = importlib.import_module(n)\n"
        "print(getattr(m, '__version__', None) or md.version(n))\n"
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code, module], capture_output=True, text=True, cwd="/"
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise StagingError(f"{venv}: import {module} failed: {tail[0]}")
    return done.stdout.strip().splitlines()[-1]
