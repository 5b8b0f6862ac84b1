"""The command runner inside the NFS test guest (started by guest_init.sh; stdlib only).

Why a spool: the NFS mounts exist only inside the guest, and the one channel the host and the guest
share is the filesystem (the guest's root is the host's / through hostfs). Protocol, all in SPOOL:

    <id>.req     written by the host (temp + rename): {"argv", "cwd", "env", "timeout"}
    <id>.run     the request once taken (renamed by this runner)
    <id>.out     the command's stdout + stderr, fsync'd every 0.2 s so the host can stream it
    <id>.cancel  written by the host to stop the command (its process group is killed: status 125)
    <id>.rc      its exit status (temp + fsync + rename), last: 124 on timeout, 128+N for signal N
    SHUTDOWN     written by the host: kill what still runs, exit (guest_init.sh then powers off)

Commands run concurrently, one thread each, in their own session, with TMPDIR set to the guest's own
temp dir (guest_init.sh), whatever the host sent. Writes through hostfs stay in the
guest's page cache until written back, hence the fsyncs before the host is told anything; and the
guest's hostfs cache is not revalidated against the host, hence the page-cache drop before a
command when no other one runs (files edited on the host between commands are then read afresh).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

POLL_S = 0.1
SYNC_S = 0.2
TIMEOUT_RC, CANCEL_RC, START_RC = 124, 125, 127
TMPDIR = os.environ.get("TMPDIR", "/tmp")


def publish(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.rename(tmp, path)


def drop_caches() -> None:
    with contextlib.suppress(OSError):
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


class Runner:
    def __init__(self, spool: Path) -> None:
        self.spool = spool
        self.running: dict[str, subprocess.Popen] = {}
        self.lock = threading.Lock()

    def serve(self) -> None:
        while not (self.spool / "SHUTDOWN").exists():
            for name in sorted(os.listdir(self.spool)):
                if name.endswith(".req"):
                    rid = name[: -len(".req")]
                    os.rename(self.spool / name, self.spool / f"{rid}.run")
                    threading.Thread(target=self.run_one, args=(rid,), daemon=True).start()
            time.sleep(POLL_S)
        with self.lock:
            procs = list(self.running.values())
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        (self.spool / "SHUTDOWN").unlink()

    def run_one(self, rid: str) -> None:
        base = self.spool / rid
        request = json.loads((self.spool / f"{rid}.run").read_text())
        with self.lock:
            if not self.running:
                drop_caches()
        out = open(f"{base}.out", "wb")  # noqa: SIM115 (closed in the finally below)
        try:
            rc = self.execute(rid, request, out)
        except Exception as exc:  # a runner-side failure is the caller's to see, not a hang
            out.write(f"[nfs guest runner: {exc!r}]\n".encode())
            rc = START_RC
        finally:
            out.flush()
            os.fsync(out.fileno())
            out.close()
        publish(Path(f"{base}.rc"), f"{rc}\n")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{base}.run")
            os.unlink(f"{base}.cancel")

    def execute(self, rid: str, request: dict, out) -> int:
        try:
            proc = subprocess.Popen(
                request["argv"], cwd=request.get("cwd") or "/", env={**request["env"], "TMPDIR": TMPDIR},
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            out.write(f"[nfs guest runner: cannot start {request['argv'][0]}: {exc}]\n".encode())
            return START_RC
        with self.lock:
            self.running[rid] = proc
        deadline = time.monotonic() + float(request.get("timeout", 3600))
        cancel = self.spool / f"{rid}.cancel"
        rc, last_sync = None, 0.0
        while (status := proc.poll()) is None:
            now = time.monotonic()
            if now > deadline or cancel.exists():
                rc = TIMEOUT_RC if now > deadline else CANCEL_RC
                why = "timed out" if rc == TIMEOUT_RC else "cancelled by the host"
                out.write(f"\n[nfs guest runner: {why}: killed]\n".encode())
                break
            if now - last_sync > SYNC_S:
                os.fsync(out.fileno())
                last_sync = now
            time.sleep(POLL_S)
        with contextlib.suppress(ProcessLookupError):  # what it left behind in its own group
            os.killpg(proc.pid, signal.SIGKILL)
        status = proc.wait()
        with self.lock:
            del self.running[rid]
        if rc is not None:
            return rc
        return 128 - status if status < 0 else status


if __name__ == "__main__":
    Runner(Path(sys.argv[1])).serve()
