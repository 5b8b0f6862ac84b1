"""Node fingerprints: what a node that ran an episode actually is, stored once per distinct one.

The contract freezes the settings and the declared package versions; a fingerprint adds what each
node is: its CPU (model and ISA flags), kernel and libc, the simulator and renderer stack this process
has loaded (ManiSkill/SAPIEN and the Vulkan device SAPIEN renders on, or MuJoCo/robosuite and the
MUJOCO_GL backend with its GL renderer), numpy and its BLAS, and, from the model server's hello spec
(`stack`, `harness.model.policyload.model_stack`), torch, CUDA and the GPU the policy runs on. Two
nodes with one fingerprint simulate with the same stack; two fingerprints may not (the canary is what
checks whether they do).

Stored content-addressed: `<run>/fingerprints/<id>.json`, the id the first 16 hex digits of the
sha256 of the canonical JSON, written atomically (a uniquely named temporary file, fsync, then a hard
link onto the final name: an exclusive create, so over NFS too a reader sees either no file or the
whole one, and two nodes writing one id leave one file). Each record names its fingerprint by id.

Nothing here reads the environment wholesale: only the renderer variables named in RENDER_VARS (no
secret lives there), never a token or a path under $HOME.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import platform
import re
import socket
import sys
import uuid
from functools import cache
from pathlib import Path
from typing import Any

FINGERPRINT_DIR = "fingerprints"
ID_HEX = 16
UNKNOWN = "unknown"  # the group of records that carry no fingerprint (written before there were any)
# modules whose loaded version decides what an episode does; read from sys.modules, never imported here
SIM_MODULES = ("mani_skill", "sapien", "mujoco", "robosuite", "libero", "gymnasium", "torch", "numpy")
RENDER_VARS = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "MUJOCO_EGL_DEVICE_ID")  # the only env vars read
SOFTWARE_RENDERERS = ("llvmpipe", "lavapipe", "softpipe", "swiftshader", "swrast", "osmesa")
_ID = re.compile(rf"^[0-9a-f]{{{ID_HEX}}}$")


def fingerprint_dir(run_root: Path) -> Path:
    return Path(run_root) / FINGERPRINT_DIR


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def cpu_facts() -> dict[str, Any]:
    """The CPU model and its ISA flags as /proc/cpuinfo lists them for the first processor."""
    fields: dict[str, str] = {}
    for line in _read("/proc/cpuinfo").split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags") or fields.get("Features") or ""  # x86, or aarch64
    return {
        "machine": platform.machine(),
        "model": fields.get("model name") or fields.get("CPU part") or platform.processor() or UNKNOWN,
        "flags": sorted(set(flags.split())),
    }


def os_facts() -> dict[str, Any]:
    pretty = next(
        (line.split("=", 1)[1].strip().strip('"') for line in _read("/etc/os-release").splitlines()
         if line.startswith("PRETTY_NAME=")),
        UNKNOWN,
    )  # fmt: skip
    return {
        "kernel": platform.release(),
        "os": pretty,
        "libc": "-".join(platform.libc_ver()) or UNKNOWN,
        "python": platform.python_version(),
    }


def _openblas_core() -> str | None:
    """The kernel OpenBLAS picked for this CPU at run time (DYNAMIC_ARCH builds choose per CPU)."""
    import numpy

    libs = Path(numpy.__file__).parent.parent / "numpy.libs"
    for lib in sorted(libs.glob("libopenblas*.so*")) if libs.is_dir() else []:
        with contextlib.suppress(OSError, AttributeError):
            handle = ctypes.CDLL(str(lib))
            for name in ("openblas_get_corename64_", "openblas_get_corename"):
                if hasattr(handle, name):
                    func = getattr(handle, name)
                    func.restype = ctypes.c_char_p
                    return func().decode()
    return None


def numpy_facts() -> dict[str, Any]:
    import numpy

    out: dict[str, Any] = {"version": numpy.__version__}
    with contextlib.suppress(Exception):
        blas = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
        out["blas"] = f"{blas.get('name')} {blas.get('version')}"
    with contextlib.suppress(Exception):
        out["blas_core"] = _openblas_core()
    umath = sys.modules.get("numpy._core._multiarray_umath")  # numpy 2
    umath = umath or sys.modules.get("numpy.core._multiarray_umath")
    with contextlib.suppress(Exception):  # the SIMD kernels numpy dispatches to on this CPU
        features = umath.__cpu_features__  # type: ignore[union-attr]
        out["simd"] = sorted(f for f in umath.__cpu_dispatch__ if features.get(f))  # type: ignore[union-attr]
    return out


def _software(text: str) -> bool:
    return any(name in text.lower() for name in SOFTWARE_RENDERERS)


@cache
def nvidia_driver() -> str | None:
    """The NVIDIA kernel driver's version, when this node has one."""
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d[\d.]+)", _read("/proc/driver/nvidia/version"))
    return match.group(1) if match else None


def renderer_facts() -> dict[str, Any]:
    """The renderer the loaded simulator draws with: SAPIEN's Vulkan device, or MuJoCo's GL backend
    and (when a GL context is current, as after an episode rendered) its renderer string."""
    out: dict[str, Any] = {}
    if "sapien" in sys.modules:
        device = _vulkan_device()
        out["vulkan_device"] = device
        out["software"] = _software(device)
    if "mujoco" in sys.modules:
        out.update({name.lower(): os.environ.get(name) for name in RENDER_VARS})
        gl = _current_gl()
        if gl:
            out["gl"] = gl
            out["software"] = _software(" ".join(gl.values())) or out.get("mujoco_gl") == "osmesa"
        elif out.get("mujoco_gl") == "osmesa":
            out["software"] = True
    driver = nvidia_driver()
    if driver:
        out["nvidia_driver"] = driver
    return out


@cache
def _vulkan_device() -> str:
    """The Vulkan device SAPIEN renders on (its device summary's first line), once per process."""
    with contextlib.suppress(Exception):
        summary = str(sys.modules["sapien"].render.get_device_summary()).strip()
        return summary.splitlines()[0].removeprefix("GPU:").strip() or UNKNOWN
    return UNKNOWN


def _current_gl() -> dict[str, str]:
    """GL_VENDOR/RENDERER/VERSION of the current context, if PyOpenGL is loaded and one is current."""
    if "OpenGL" not in sys.modules:  # no PyOpenGL in this process: nothing renders through GL here
        return {}
    try:
        import OpenGL.GL as gl  # the binding MuJoCo's renderer already loaded PyOpenGL for
    except Exception:
        return {}
    out = {}
    with contextlib.suppress(Exception):
        for key in ("GL_VENDOR", "GL_RENDERER", "GL_VERSION"):
            value = gl.glGetString(getattr(gl, key))
            if value:
                out[key.lower()[3:]] = value.decode(errors="replace")
    return out


def loaded_versions(names: tuple[str, ...] = SIM_MODULES) -> dict[str, str]:
    """The version of each of `names` this process has imported (those it has not are left out)."""
    out = {}
    for name in names:
        module = sys.modules.get(name)
        if module is not None:
            out[name] = str(getattr(module, "__version__", None) or _dist_version(name))
    return out


@cache
def _dist_version(module: str) -> str:
    """A module without __version__ (LIBERO's): the version of the distribution that installed it."""
    import importlib.metadata

    with contextlib.suppress(Exception):
        dists = importlib.metadata.packages_distributions().get(module) or []
        return " ".join(f"{d}=={importlib.metadata.version(d)}" for d in sorted(set(dists))) or UNKNOWN
    return UNKNOWN


@cache
def _static_facts() -> dict[str, Any]:
    return {"cpu": cpu_facts(), "os": os_facts(), "numpy": numpy_facts()}


def sim_facts() -> dict[str, Any]:
    """The sim side of this node as this process runs it; read after the simulator has built an
    episode, so that what it loaded (and its renderer) is there to see."""
    return {**_static_facts(), "sim": loaded_versions(), "renderer": renderer_facts()}


def model_facts(server_spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The model side, as the model server stated it in its hello spec (`stack`); None when it did not
    (an older server, or an external policy server)."""
    stack = (server_spec or {}).get("stack")
    return stack if isinstance(stack, dict) else None


def canonical(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str).encode()


def fingerprint_id(doc: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(doc)).hexdigest()[:ID_HEX]


def sim_id(doc: dict[str, Any]) -> str:
    """The id of a fingerprint's sim side alone: what a canary verdict is filed under."""
    return fingerprint_id(doc.get("sim_side") or {})


def build(server_spec: dict[str, Any] | None) -> dict[str, Any]:
    return {"sim_side": sim_facts(), "model_side": model_facts(server_spec)}


def store(run_root: Path, doc: dict[str, Any]) -> str:
    """Write `doc` as `<run>/fingerprints/<id>.json` unless it is there; returns its id."""
    ident = fingerprint_id(doc)
    final = fingerprint_dir(run_root) / f"{ident}.json"
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{ident}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, canonical(doc) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, final)  # exclusive: another node's copy of the same id stands, and is identical
    except FileExistsError:
        pass
    except OSError:  # a filesystem without hard links: a rename is atomic too
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return ident


class NodePrint:
    """A process's fingerprints: read afresh for each record (what the simulator has loaded by then),
    stored once per distinct id and run."""

    def __init__(self) -> None:
        self._stored: set[tuple[str, str]] = set()

    def id_for(self, run_root: Path, server_spec: dict[str, Any] | None) -> str:
        doc = build(server_spec)
        ident = fingerprint_id(doc)
        if (str(run_root), ident) not in self._stored:
            store(run_root, doc)
            self._stored.add((str(run_root), ident))
        return ident


def is_id(value: Any) -> bool:
    return isinstance(value, str) and bool(_ID.match(value))


def read_all(run_root: Path) -> dict[str, dict[str, Any]]:
    """Every fingerprint stored in a run, by id (an unreadable file is left out)."""
    out = {}
    for path in sorted(fingerprint_dir(run_root).glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            out[path.stem] = json.loads(path.read_text())
    return out


def describe(doc: dict[str, Any] | None) -> str:
    """One line for a table: CPU, simulator stack, renderer, and the model side's GPU."""
    if not doc:
        return "no fingerprint (records from before fingerprints)"
    sim = doc.get("sim_side") or {}
    cpu = (sim.get("cpu") or {}).get("model", UNKNOWN)
    versions = " ".join(f"{k} {v}" for k, v in sorted((sim.get("sim") or {}).items()) if k != "numpy")
    render = sim.get("renderer") or {}
    gl = render.get("gl") or {}
    device = render.get("vulkan_device") or gl.get("renderer") or render.get("mujoco_gl")
    kind = "software" if render.get("software") else "GPU" if device else ""
    model = doc.get("model_side") or {}
    gpus = ", ".join(model.get("gpus") or []) or ("CPU" if model else "model side unknown")
    parts = [cpu, versions, f"render {device} ({kind})" if device else "", f"policy on {gpus}"]
    return "; ".join(p for p in parts if p)
