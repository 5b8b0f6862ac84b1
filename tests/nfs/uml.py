"""A real kernel NFS server and two kernel NFS client mounts of one export, for the NFS tests.

Why: the run dir of a real cluster is on NFS, where `stat` and `exists` lie for tens of seconds
and two clients' appends to one file lose data; processes sharing one local disk hide all of it.
This machine's kernel has no NFS, so Debian's user-mode-linux kernel (Linux 6.1 as an ordinary
host process, the host's / as its root through hostfs) runs kernel nfsd exporting a guest tmpfs and
mounts it twice, `mnt1` via 127.0.0.1 and `mnt2` via 127.0.0.2: two distinct NFS clients (own
connection, caches and NFSv4 client identity), as two nodes would be. The mounts exist only inside
the guest, so `Guest.run` runs a command there (same paths, repo and venvs) with env, cwd and a
timeout, streams its output and returns its exit status. Inside the guest `export` is the server's
own filesystem: the truth, with no client cache in between.

All state lives in one dir (default /tmp/nfs-test or `NFS_TEST_STATE`; a test session takes
/tmp/nfs-test-<pid>): pid and console log of the guest, its shim, module tree, command spool, the
host-side (empty) mount points, and `tmp/`, where the guest mounts its own TMPDIR (the host's /tmp
is shared through hostfs, and temp dirs named by pid mean another kernel's processes there). `down`
stops only the guest whose pid it recorded (and that guest's own process group), removes the dir.
The NFS facts the queue's design rests on are in the README ("How it stays correct on NFS").

    python tests/nfs/uml.py up | status | down
    python tests/nfs/uml.py exec -- ls /tmp/nfs-test/mnt1   # runs inside the guest
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

HERE = Path(__file__).resolve().parent
DEFAULT_STATE = Path(os.environ.get("NFS_TEST_STATE", "/tmp/nfs-test"))
UML_MODULES = Path("/usr/lib/uml/modules")
GUEST_PROGRAMS = ("linux.uml", "gcc", "modprobe", "ip", "rpcbind", "rpc.nfsd", "rpc.mountd", "exportfs")
GUEST_PROGRAMS += ("mount.nfs",)
HOST_ONLY_ENV = ("LD_PRELOAD", "OLDPWD", "SHLVL", "_")  # never passed into the guest
POLL_S = 0.05
_BOOTED: dict[int, subprocess.Popen] = {}  # guests this process started: reaped at `down`, no zombie


class NfsError(RuntimeError):
    """The NFS guest cannot be started or used; the message says why (and shows the console)."""


@dataclass(frozen=True)
class Result:
    rc: int
    output: str


@dataclass(frozen=True)
class Guest:
    """A running guest. Paths are the same on host and guest; only inside the guest are `mnt1`,
    `mnt2` NFS mounts and `export` the server's tmpfs."""

    state: Path = DEFAULT_STATE

    @property
    def mnt1(self) -> Path:
        return self.state / "mnt1"

    @property
    def mnt2(self) -> Path:
        return self.state / "mnt2"

    @property
    def export(self) -> Path:
        return self.state / "export"

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        timeout: float = 600,
        out: TextIO | None = None,
    ) -> Result:
        """Run `argv` inside the guest and wait for it, with `env` (default: this process's) but TMPDIR
        the guest's own. Its output is streamed to `out` (default: the current sys.stdout, so pytest
        captures it) and returned. Exit status 124: it ran past `timeout` and was killed; an
        interrupted caller (Ctrl-C) has it killed too. NfsError if the guest dies meanwhile."""
        spool = self.state / "spool"
        rid = f"{time.time_ns()}-{os.getpid()}"
        request = {
            "argv": [str(a) for a in argv],
            "cwd": str(cwd or os.getcwd()),
            "env": {k: v for k, v in (os.environ if env is None else env).items() if k not in HOST_ONLY_ENV},
            "timeout": timeout,
        }
        tmp = spool / f"{rid}.tmp"
        tmp.write_text(json.dumps(request))
        tmp.rename(spool / f"{rid}.req")
        chunks: list[str] = []
        backstop = time.monotonic() + timeout + 60  # the runner kills it at `timeout`
        try:
            with _Tail(spool / f"{rid}.out") as tail:
                while not (spool / f"{rid}.rc").exists():
                    self._stream(tail.read(), chunks, out)
                    if not _alive(_read_pid(self.state)):
                        console = console_tail(self.state)
                        raise NfsError(f"the NFS guest died while running {argv[0]}: {console}")
                    if time.monotonic() > backstop:
                        raise NfsError(f"the guest's runner did not answer for {argv[0]} (spool {spool})")
                    time.sleep(POLL_S)
                self._stream(tail.read(), chunks, out)
            rc = int((spool / f"{rid}.rc").read_text())
        except BaseException:
            (spool / f"{rid}.cancel").touch()  # an interrupted caller leaves nothing running
            raise
        for suffix in (".out", ".rc"):
            (spool / f"{rid}{suffix}").unlink(missing_ok=True)
        return Result(rc, "".join(chunks))

    @staticmethod
    def _stream(text: str, chunks: list[str], out: TextIO | None) -> None:
        if text:
            chunks.append(text)
            (out or sys.stdout).write(text)
            (out or sys.stdout).flush()


class _Tail:
    """Reads what was appended to a file since the last read (the file may not exist yet)."""

    def __init__(self, path: Path) -> None:
        self.path, self.handle = path, None

    def __enter__(self) -> _Tail:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle:
            self.handle.close()

    def read(self) -> str:
        if self.handle is None:
            try:
                self.handle = open(self.path, "rb")  # noqa: SIM115 (closed in __exit__)
            except FileNotFoundError:
                return ""
        return self.handle.read().decode(errors="replace")


def missing_programs() -> list[str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    missing = [p for p in GUEST_PROGRAMS if shutil.which(p, path=path) is None]
    return missing + ([] if UML_MODULES.is_dir() else [str(UML_MODULES)])


def healthy(state: Path = DEFAULT_STATE) -> bool:
    return _alive(_read_pid(state)) and (state / "ready").exists() and not (state / "failed").exists()


def up(
    state: Path = DEFAULT_STATE,
    timeout: float = 240,
    mem: str = "2G",
    mount_opts: str | None = None,
    log=print,
) -> Guest:
    """Boot the guest and wait until both mounts are up (or reuse a healthy one). NfsError, with the
    reason and the console's last lines, when it cannot come up; nothing is left running then.
    `mount_opts`: the client mounts' options (default $NFS_TEST_MOUNT_OPTS, else `vers=4.2`)."""
    if healthy(state):
        log(f"[nfs] guest already up (pid {_read_pid(state)}, state {state})")
        return Guest(state)
    missing = missing_programs()
    if missing:
        raise NfsError(f"the NFS guest needs {', '.join(missing)} (install with scripts/setup.sh)")
    down(state, log=lambda _msg: None)
    start = time.monotonic()
    try:
        _layout(state, mount_opts or os.environ.get("NFS_TEST_MOUNT_OPTS", "vers=4.2"))
    except NfsError:
        down(state, log=lambda _msg: None)
        raise
    with open(state / "console.log", "wb") as console:
        proc = subprocess.Popen(
            ["linux.uml", f"mem={mem}", "rootfstype=hostfs", "rootflags=/", "rw",
             f"init={HERE / 'guest_init.sh'}", f"uml_dir={state / 'umldir'}", "umid=nfstest", "con=null",
             "con0=null,fd:1", "quiet", f"NFS_TEST_STATE={state}"],
            env={**os.environ, "LD_PRELOAD": str(state / "shim" / "xstate_shim.so")},
            stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    (state / "uml.pid").write_text(f"{proc.pid}\n")
    _BOOTED[proc.pid] = proc
    deadline = time.monotonic() + timeout
    while not (state / "ready").exists():
        reason = None
        if (state / "failed").exists():
            reason = (state / "failed").read_text().strip()
        elif proc.poll() is not None:
            reason = f"linux.uml exited with status {proc.returncode} during setup"
        elif time.monotonic() > deadline:
            reason = f"the mounts were not up after {timeout:g} s"
        if reason:
            tail = console_tail(state)
            down(state, log=lambda _msg: None)
            raise NfsError(f"the NFS guest did not come up: {reason}; console:\n{tail}")
        time.sleep(0.1)
    log(f"[nfs] guest up in {time.monotonic() - start:.1f} s: {(state / 'ready').read_text().strip()}")
    return Guest(state)


def _layout(state: Path, mount_opts: str) -> None:
    """The state dir: shim, module tree, spool, mount points and the guest's settings."""
    for sub in ("shim", "spool", "umldir", "export", "mnt1", "mnt2", "tmp"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    for sub in ("mnt1", "mnt2", "export"):  # hidden by the guest's mounts; seen by a host process only
        (state / sub / "HOST_DIR_NOT_NFS").write_text("the NFS mounts exist only inside the guest\n")
    shim = state / "shim" / "xstate_shim.so"
    built = subprocess.run(
        ["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-o", str(shim), str(HERE / "xstate_shim.c"), "-ldl"],
        capture_output=True, text=True,
    )  # fmt: skip
    if built.returncode != 0:
        raise NfsError(f"cannot build the UML shim {HERE / 'xstate_shim.c'}: {built.stderr.strip()}")
    version = sorted(UML_MODULES.iterdir(), key=lambda p: [int(x) for x in p.name.split(".") if x.isdigit()])
    modules = state / "modroot" / "lib" / "modules"
    modules.mkdir(parents=True, exist_ok=True)
    (modules / version[-1].name).symlink_to(version[-1])
    settings = {
        "GUEST_HOSTNAME": "nfs-guest", "MODROOT": state / "modroot", "EXPORT_DIR": state / "export",
        "EXPORT_SIZE": os.environ.get("NFS_TEST_EXPORT_SIZE", "1g"), "MNT1": state / "mnt1",
        "MNT2": state / "mnt2", "MOUNT_OPTS": mount_opts,
        "GUEST_PYTHON": sys.executable, "RUNNER": HERE / "guest_runner.py",
    }  # fmt: skip
    (state / "guest.env").write_text("".join(f"{k}='{v}'\n" for k, v in settings.items()))


def down(state: Path = DEFAULT_STATE, log=print) -> None:
    """Stop the guest (clean power-off, else by its pid) and remove the state dir. Idempotent."""
    pid = _read_pid(state)
    if _alive(pid) and _is_uml(pid):
        (state / "spool").mkdir(parents=True, exist_ok=True)
        (state / "spool" / "SHUTDOWN").touch()
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        log(f"[nfs] guest stopped ({'clean' if (state / 'stopped').exists() else 'killed'})")
    if pid in _BOOTED:
        _BOOTED.pop(pid).wait()
    if pid:
        for leftover in _group_members(pid):  # UML's per-address-space helper processes
            with contextlib.suppress(ProcessLookupError):
                os.kill(leftover, signal.SIGKILL)
    shutil.rmtree(state, ignore_errors=True)


def console_tail(state: Path, lines: int = 25) -> str:
    try:
        text = (state / "console.log").read_text(errors="replace")
    except OSError:
        return "(no console log)"
    return "\n".join(text.splitlines()[-lines:])


def _read_pid(state: Path) -> int | None:
    try:
        return int((state / "uml.pid").read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (our own child that exited) is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _is_uml(pid: int) -> bool:
    try:
        return b"linux.uml" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _group_members(pgid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and int(stat.parent.name) != os.getpid() and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--timeout", type=float, default=3600, help="exec: seconds before it is killed")
    parser.add_argument("command", choices=("up", "status", "down", "exec"))
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="exec: -- the command to run inside the guest")
    args = parser.parse_args()
    args.argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.command == "up":
        up()
    elif args.command == "down":
        down()
    elif args.command == "status":
        print(f"up: {(DEFAULT_STATE / 'ready').read_text()}" if healthy() else "down")
    else:
        if not healthy():
            raise SystemExit("nfs: the guest is not up (python tests/nfs/uml.py up)")
        return Guest().run(args.argv or ["true"], timeout=args.timeout).rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
