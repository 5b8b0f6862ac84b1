"""A real multi-node Slurm cluster on this one machine, for tests and CI (`up` / `down` / `status`).

Why: the pipeline is Slurm-native, so its tests run `srun`, `sbatch`, `scancel`, `sacct` and submitit
against real daemons. One slurmctld, a slurmdbd on a private mariadbd (accounting: submitit needs
sacct), a private munged and N `slurmd -N nX` (multiple-slurmd build). Each slurmd runs under
`unshare --uts --mount` with its node name as hostname and a private /etc/hosts, so tasks see
distinct hosts; every node has 2 fake GPUs (gres `File=` symlinks to /dev/null). All state, sockets,
logs and pid files live under one state dir (default /tmp/slurm-test-cluster); ports are picked free
at `up`. `down` stops only the processes whose pid files are in that dir. `up` on a healthy cluster
reuses it. Facts this rests on: notes/local-slurm-cluster.md.

    python tests/support/slurm_cluster.py up [--nodes 3]   # prints `export SLURM_CONF=...`
    python tests/support/slurm_cluster.py status
    python tests/support/slurm_cluster.py down
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_STATE = Path(os.environ.get("SLURM_TEST_STATE", "/tmp/slurm-test-cluster"))
BINARIES = ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "mariadb-install-db", "srun", "sinfo")
GPUS_PER_NODE = 2
CPUS_PER_NODE = 4  # oversubscribed (SlurmdParameters=config_overrides): CPUs are not what tests measure


class ClusterError(RuntimeError):
    """The cluster could not be brought up; the message names the daemon and its log."""


def missing_binaries() -> list[str]:
    """Slurm/munge/mariadb programs not on PATH (tests skip when any is missing)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [b for b in BINARIES if shutil.which(b, path=path) is None]


def conf_path(state: Path = DEFAULT_STATE) -> Path:
    return state / "etc" / "slurm.conf"


def client_env(state: Path = DEFAULT_STATE) -> dict[str, str]:
    """Environment for Slurm clients (srun, sbatch, sacct, submitit) talking to this cluster."""
    return {**os.environ, "SLURM_CONF": str(conf_path(state))}


def status(state: Path = DEFAULT_STATE) -> dict[str, str]:
    """Node name → Slurm state (`idle`, `alloc`, ...); empty when the cluster is not up."""
    if not conf_path(state).exists() or not _all_alive(state):
        return {}
    done = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %t"],
        capture_output=True,
        text=True,
        env=client_env(state),
        timeout=10,
    )
    if done.returncode != 0:
        return {}
    return dict(line.split() for line in done.stdout.splitlines() if line.strip())


def healthy(state: Path = DEFAULT_STATE) -> bool:
    nodes = status(state)
    meta = _meta(state)
    return (
        bool(nodes)
        and len(nodes) == meta.get("nodes")
        and all(s.rstrip("*") in _READY for s in nodes.values())
    )


_READY = {"idle", "mix", "alloc", "comp"}


def up(nodes: int = 3, state: Path = DEFAULT_STATE, log=print) -> Path:
    """Bring the cluster up (or reuse a healthy one); returns the slurm.conf path."""
    if healthy(state) and _meta(state).get("nodes") == nodes:
        log(f"[cluster] already up: {nodes} nodes, SLURM_CONF={conf_path(state)}")
        return conf_path(state)
    missing = missing_binaries()
    if missing:
        raise ClusterError(f"missing programs: {', '.join(missing)} (run scripts/setup.sh)")
    down(state, log=lambda _msg: None)
    start = time.monotonic()
    shutil.rmtree(state, ignore_errors=True)
    ports = _free_ports(4 + nodes)
    meta = {"nodes": nodes, "ctld": ports[0], "dbd": ports[1], "db": ports[2], "slurmd": ports[4 : 4 + nodes]}
    _write_configs(state, meta)
    env = {**client_env(state), "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"}
    _start_munge(state, env)
    _start_mariadb(state, meta, env)
    _daemon(state, "slurmdbd", ["slurmdbd"], env)
    _wait_port(state, meta["dbd"], "slurmdbd")
    _daemon(state, "slurmctld", ["slurmctld", "-c", "-i"], env)
    _wait_port(state, meta["ctld"], "slurmctld")
    for i in range(1, nodes + 1):
        _start_slurmd(state, f"n{i}", env)
    _wait_nodes(state, nodes, env)
    log(f"[cluster] up: {nodes} nodes in {time.monotonic() - start:.1f}s, SLURM_CONF={conf_path(state)}")
    return conf_path(state)


def down(state: Path = DEFAULT_STATE, log=print) -> None:
    """Stop every daemon whose pid file is in the state dir (nothing else); keeps the dir for logs."""
    stopped = []
    for pidfile in sorted((state / "run").glob("*.pid")) if (state / "run").exists() else []:
        pid = _read_pid(pidfile)
        if pid and _alive(pid):
            os.kill(pid, signal.SIGTERM)
            stopped.append((pidfile.stem, pid))
    deadline = time.monotonic() + 10
    for _name, pid in stopped:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    for pidfile in (state / "run").glob("*.pid") if (state / "run").exists() else []:
        pidfile.unlink()
    log(f"[cluster] down: stopped {', '.join(n for n, _ in stopped) or 'nothing'}")


def _write_configs(state: Path, meta: dict) -> None:
    for sub in ("etc", "run", "log", "ctld", "spool", "munge/run", "munge/key", "gpu", "mysql"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(state / "munge" / "run", 0o755)
    os.chmod(state / "munge" / "key", 0o700)
    host = socket.gethostname().split(".")[0]
    sock = state / "munge" / "run" / "munge.socket"
    node_lines, gres_lines = [], ["AutoDetect=off"]
    for i in range(1, meta["nodes"] + 1):
        name, port = f"n{i}", meta["slurmd"][i - 1]
        node_lines.append(
            f"NodeName={name} NodeHostname={name} NodeAddr=127.0.0.1 Port={port} CPUs={CPUS_PER_NODE} "
            f"RealMemory=1000 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
        )
        for g in range(GPUS_PER_NODE):
            dev = state / "gpu" / f"{name}-gpu{g}"
            dev.symlink_to("/dev/null")
            gres_lines.append(f"NodeName={name} Name=gpu File={dev}")
    conf = f"""ClusterName=localcluster
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={meta["ctld"]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={state}/ctld
SlurmdSpoolDir={state}/spool/%n
SlurmctldPidFile={state}/run/slurmctld.pid
SlurmdPidFile={state}/run/slurmd-%n.pid
SlurmctldLogFile={state}/log/slurmctld.log
SlurmdLogFile={state}/log/slurmd-%n.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={meta["dbd"]}
AccountingStoragePass={sock}
AccountingStorageTRES=gres/gpu
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
InactiveLimit=0
MinJobAge=30
GresTypes=gpu
{chr(10).join(node_lines)}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
    (state / "etc" / "slurm.conf").write_text(conf)
    (state / "etc" / "gres.conf").write_text("\n".join(gres_lines) + "\n")
    (state / "etc" / "cgroup.conf").write_text(
        "CgroupPlugin=cgroup/v1\nConstrainCores=no\nConstrainDevices=no\nConstrainRAMSpace=no\nConstrainSwapSpace=no\n"
    )
    dbd = state / "etc" / "slurmdbd.conf"
    dbd.write_text(
        f"AuthType=auth/munge\nAuthInfo=socket={sock}\nDbdAddr=127.0.0.1\nDbdHost={host}\nDbdPort={meta['dbd']}\n"
        f"SlurmUser=root\nPidFile={state}/run/slurmdbd.pid\nLogFile={state}/log/slurmdbd.log\n"
        f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={meta['db']}\n"
        "StorageUser=root\nStorageLoc=slurm_acct_db\n"
    )
    os.chmod(dbd, 0o600)
    hosts = Path("/etc/hosts").read_text()
    names = " ".join(f"n{i}" for i in range(1, meta["nodes"] + 1))
    (state / "etc" / "hosts").write_text(f"{hosts.rstrip()}\n127.0.0.1 {names}\n127.0.0.1 {host}\n")
    (state / "meta.json").write_text(json.dumps(meta))


def _start_munge(state: Path, env: dict[str, str]) -> None:
    key = state / "munge" / "key" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = state / "munge" / "run" / "munge.socket"
    _daemon(
        state,
        "munged",
        [
            "munged",
            f"--socket={sock}",
            f"--key-file={key}",
            f"--pid-file={state}/run/munged.pid",
            f"--log-file={state}/log/munged.log",
            f"--seed-file={state}/munge/seed",
            "--force",
        ],
        env,
    )
    _wait_for(lambda: sock.exists(), 10, "munged", state / "log" / "munged.log")


def _start_mariadb(state: Path, meta: dict, env: dict[str, str]) -> None:
    data = state / "mysql"
    log = state / "log" / "mariadb.log"
    with open(log, "ab") as out:
        done = subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={data}",
                "--user=root",
                "--skip-test-db",
                "--auth-root-authentication-method=normal",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    if done.returncode != 0:
        raise ClusterError(f"mariadb-install-db failed: see {log}")
    args = [
        "mariadbd",
        "--no-defaults",
        f"--datadir={data}",
        "--user=root",
        "--bind-address=127.0.0.1",
        f"--port={meta['db']}",
        f"--socket={state}/run/mysqld.sock",
        f"--pid-file={state}/run/mariadbd.pid",
        "--skip-grant-tables",
        f"--log-error={log}",
        "--innodb-buffer-pool-size=32M",
    ]
    _daemon(state, "mariadbd", args, env, foreground=True)
    _wait_port(state, meta["db"], "mariadbd")


def _start_slurmd(state: Path, name: str, env: dict[str, str]) -> None:
    """slurmd in its own UTS + mount namespace: hostname = node name, private /etc/hosts bind-mounted."""
    script = f"hostname {name} && mount --bind {state}/etc/hosts /etc/hosts && exec slurmd -N {name}"
    _daemon(state, f"slurmd-{name}", ["unshare", "--uts", "--mount", "sh", "-c", script], env)


def _daemon(state: Path, name: str, args: list[str], env: dict[str, str], foreground: bool = False) -> None:
    """Start a daemon detached: stdin /dev/null, output to its log, no inherited fds, own session."""
    with open(state / "log" / f"{name}.stdout", "ab") as out:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            close_fds=True,
            start_new_session=True,
        )
    if foreground:
        return
    code = proc.wait(timeout=30)
    if code != 0:
        raise ClusterError(f"{name} failed to start (exit {code}): see {state}/log/{name}*")


def _wait_nodes(state: Path, nodes: int, env: dict[str, str]) -> None:
    def ready() -> bool:
        got = status(state)
        return len(got) == nodes and all(s.rstrip("*") in _READY for s in got.values())

    _wait_for(ready, 30, "slurmd nodes", state / "log")


def _wait_port(state: Path, port: int, name: str) -> None:
    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    _wait_for(listening, 30, name, state / "log")


def _wait_for(check, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise ClusterError(f"{what} not ready after {timeout:.0f}s: see {log}")


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _meta(state: Path) -> dict:
    try:
        return json.loads((state / "meta.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _all_alive(state: Path) -> bool:
    meta = _meta(state)
    names = ["munged", "mariadbd", "slurmdbd", "slurmctld"] + [
        f"slurmd-n{i}" for i in range(1, meta.get("nodes", 0) + 1)
    ]
    return bool(meta) and all(_alive(_read_pid(state / "run" / f"{n}.pid")) for n in names)


def _read_pid(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return 0


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[-1].startswith("Z"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--nodes", type=int, default=3, help="slurmd nodes n1..nN (default 3)")
    parser.add_argument(
        "--state", type=Path, default=DEFAULT_STATE, help=f"state dir (default {DEFAULT_STATE})"
    )
    args = parser.parse_args()
    say = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    try:
        if args.action == "up":
            print(f"export SLURM_CONF={up(args.nodes, args.state, log=say)}")
        elif args.action == "down":
            down(args.state, log=say)
        else:
            nodes = status(args.state)
            print(json.dumps({"healthy": healthy(args.state), "nodes": nodes, "state": str(args.state)}))
            sys.exit(0 if healthy(args.state) else 1)
    except ClusterError as err:
        print(f"[cluster] error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
