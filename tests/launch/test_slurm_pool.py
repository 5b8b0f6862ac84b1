"""The node script as a real Slurm pool: 3-node srun, a killed node, resume, fake GPUs, submitit.

Runs against the local cluster (tests/support/slurm_cluster.py, `slurm` fixture) with the fast test-double
benchmark and the sleep policy, so each pool takes seconds. The sim env is staged into a node cache
that persists across sessions (the first session pays the copy, later ones reuse it: the product's
behaviour).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from support.nodecache import TEST_CACHE_MAX_GB, TEST_NODE_CACHE

ROOT = Path(__file__).resolve().parents[2]
NODE_SCRIPT = ROOT / "slurm" / "eval_node.sh"
UNITS = [f"s{s} t{t}" for s in (1, 2, 3) for t in (1, 2)]
SEEDS = 3

pytestmark = pytest.mark.slurm


def pool_env(slurm: dict[str, str], tmp_path: Path, run: str, **extra: str) -> dict[str, str]:
    env = {
        **slurm,
        "RUNS_ROOT": str(tmp_path / "runs"),
        "STUDY_RUN": run,
        "BENCHMARK": "tests.support.fastbench:FastBench",
        "POLICY": "tests/policies/sleep",
        "USE_EVAL_SEEDS": "0",
        "EVAL_TEST_NUM": str(SEEDS),
        "RECORD_VIDEO": "0",
        "STAGE_ENVS": "none",
        "NODE_CACHE": str(TEST_NODE_CACHE),
        "CACHE_MAX_GB": TEST_CACHE_MAX_GB,
        "HEARTBEAT_S": "1",
        "LEASE_TTL": "4",
        "FASTBENCH_STEPS": "3",
        "FASTBENCH_STEP_MS": "20",
    }
    env.update(extra)
    queue = tmp_path / f"{run}.queue.txt"
    queue.write_text("\n".join(UNITS) + "\n")
    made = subprocess.run(
        [
            env.get("SIM_PY", str(ROOT / "envs/sim/bin/python")),
            "scripts/new_run.py",
            run,
            "--queue",
            str(queue),
        ],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, f"new_run {run}: exit {made.returncode}\n{made.stdout}{made.stderr}"
    return env


def srun(env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """The README's srun block: one node script per node, a pool that survives a failed node."""
    cmd = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=0", *args, "bash", str(NODE_SCRIPT)]
    return subprocess.run(cmd, cwd="/tmp", env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def start_srun() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """`srun` in the background. One still running when its test ends (the test failed before its
    pool finished) is killed, which ends its job: it holds no nodes from the next tests."""
    started: list[subprocess.Popen[str]] = []

    def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
        cmd = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=0", *args, "bash", str(NODE_SCRIPT)]
        proc = subprocess.Popen(
            cmd, cwd="/tmp", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def run_dir(env: dict[str, str]) -> Path:
    return Path(env["RUNS_ROOT"]) / env["STUDY_RUN"]


def record_lines(env: dict[str, str]) -> list[dict]:
    lines = []
    for path in sorted((run_dir(env) / "eval_result").rglob("_metrics*.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip().endswith("}")]
    return lines


def planned() -> set[tuple[str, int]]:
    return {(unit.split()[1] + "@" + unit.split()[0], seed) for unit in UNITS for seed in range(SEEDS)}


def recorded(lines: list[dict]) -> set[tuple[str, int]]:
    return {(f"{r['task']}@{r['scene']}", int(r["seed"])) for r in lines if r.get("error") is None}


def job_id(env: dict[str, str], name: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", "-n", name, "-o", "%i"], env=env, capture_output=True, text=True
        )
        if out.stdout.strip():
            return out.stdout.split()[0]
        time.sleep(0.2)
    raise AssertionError(f"job {name} never showed up in squeue")


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_three_node_srun_completes_a_small_eval(slurm: dict[str, str], tmp_path: Path) -> None:
    env = pool_env(slurm, tmp_path, "three", STAGE_ENVS="sim", FASTBENCH_STEP_MS="100")
    done = srun(env, "--nodes=3")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = record_lines(env)
    assert recorded(lines) == planned()
    assert len(lines) == len(planned())  # nothing ran twice
    assert len({r["host"] for r in lines}) >= 2, Counter(r["host"] for r in lines)
    for node in ("n1", "n2", "n3"):
        log = (run_dir(env) / "logs" / f"node-{node}.log").read_text()
        assert f"SIM_PY={TEST_NODE_CACHE}/env/sim-" in log, log
        assert "done: 1 workers, 0 failed" in log


def test_killed_node_loses_nothing_and_others_finish_its_units(
    slurm: dict[str, str], tmp_path: Path, start_srun: Callable[..., subprocess.Popen[str]]
) -> None:
    env = pool_env(slurm, tmp_path, "kill", FASTBENCH_STEP_MS="150")
    proc = start_srun(env, "--nodes=3", "--job-name=kill-test")
    job = job_id(env, "kill-test")
    leases = run_dir(env) / "queue.txt.leases"

    def n2_holds_a_lease() -> bool:
        try:  # a claim's staging dir (.claim.*) is renamed into place while the glob lists it
            owners = list(leases.glob("*/owner.*"))
        except FileNotFoundError:
            return False  # looked again in a moment
        for owner in owners:
            try:
                if json.loads(owner.read_text()).get("host") == "n2":
                    return True
            except (OSError, ValueError):  # renamed by a heartbeat, or being written
                continue
        return False

    wait_for(n2_holds_a_lease, 60, "node n2 to hold a lease")
    killed = kill_node_processes(job, "n2")
    assert killed, "no process of n2's job step found"
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode != 0  # the pool reports n2's failure ...
    lines = record_lines(env)
    assert recorded(lines) == planned(), out  # ... and lost nothing
    for node in ("n1", "n3"):
        assert "done: 1 workers, 0 failed" in (run_dir(env) / "logs" / f"node-{node}.log").read_text()
    by_seed = Counter((r["task"], r["scene"], r["seed"]) for r in lines)
    assert max(by_seed.values()) == 1, by_seed  # no seed recorded twice


def kill_node_processes(job: str, node: str) -> list[int]:
    """SIGKILL every process of `job` on `node` (found by its Slurm environment), as a node crash would."""
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            items = set(environ.read_bytes().split(b"\0"))
        except OSError:
            continue
        if f"SLURM_JOB_ID={job}".encode() in items and f"SLURMD_NODENAME={node}".encode() in items:
            pids.append(int(environ.parent.name))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def test_resume_by_rerunning_the_same_srun(
    slurm: dict[str, str], tmp_path: Path, start_srun: Callable[..., subprocess.Popen[str]]
) -> None:
    env = pool_env(slurm, tmp_path, "resume", FASTBENCH_STEP_MS="150")
    proc = start_srun(env, "--nodes=3", "--job-name=resume-test")
    job = job_id(env, "resume-test")
    wait_for(lambda: len(record_lines(env)) >= 6, 60, "some records")
    subprocess.run(["scancel", job], env=env, check=True)
    proc.communicate(timeout=60)
    before = record_lines(env)
    assert 0 < len(recorded(before)) < len(planned())
    wait_for(
        lambda: (
            not subprocess.run(
                ["squeue", "-h", "-j", job], env=env, capture_output=True, text=True
            ).stdout.strip()
        ),
        30,
        "the cancelled job to leave the queue",
    )
    again = srun(env, "--nodes=3")
    assert again.returncode == 0, again.stdout + again.stderr
    lines = record_lines(env)
    assert recorded(lines) == planned()
    by_seed = Counter((r["task"], r["scene"], r["seed"]) for r in lines)
    assert max(by_seed.values()) == 1, by_seed  # finished seeds were not re-run


def test_gres_gives_one_worker_per_fake_gpu(slurm: dict[str, str], tmp_path: Path) -> None:
    env = pool_env(slurm, tmp_path, "gres1")
    done = srun(env, "--nodes=3", "--gres=gpu:1")
    assert done.returncode == 0, done.stdout + done.stderr
    for node in ("n1", "n2", "n3"):
        log = (run_dir(env) / "logs" / f"node-{node}.log").read_text()
        assert log.count(" worker ") == 1 and "CUDA_VISIBLE_DEVICES='0'" in log, log
    env = pool_env(slurm, tmp_path, "gres2", WORKERS_PER_GPU="1")
    done = srun(env, "--nodes=1", "--gres=gpu:2")
    assert done.returncode == 0, done.stdout + done.stderr
    log = next((run_dir(env) / "logs").glob("node-*.log")).read_text()
    assert log.count(" worker ") == 2, log
    assert "CUDA_VISIBLE_DEVICES='0'" in log and "CUDA_VISIBLE_DEVICES='1'" in log
    assert recorded(record_lines(env)) == planned()


def test_submitit_entry_point_runs_the_pool_and_returns_the_summary(
    slurm: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.config.rundir import RunDir
    from harness.launch.submit import submit

    env = pool_env(slurm, tmp_path, "submitit")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    shown: list[str] = []
    summary = submit(RunDir(run_dir(env)), 3, timeout_min=5, poll_s=0.5, show=shown.append)
    assert summary.state == "COMPLETED", (summary, shown)
    assert summary.planned == summary.done == len(planned())
    assert [n["rc"] for n in summary.nodes] == [0, 0, 0]
    assert sorted(n["node"] for n in summary.nodes) == ["n1", "n2", "n3"]
    assert summary.sr is not None and any("episodes" in line for line in shown)


def test_submitit_launcher_runs_an_orchestrators_pool_and_stopping_it_cancels_the_job(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    """LAUNCHER=submitit through an orchestrator (the sweep): one Slurm job of 3 nodes x 1 task
    completes the run; a second sweep stopped with SIGTERM cancels its job (it leaves the queue)."""
    knobs = {"LAUNCHER": "submitit", "POOL_NODES": "3"}
    env = pool_env(slurm, tmp_path, "sub_clean", **knobs)
    sweep = ["bash", str(ROOT / "orchestrators" / "sweep.sh"), "--configs", "clean", "--progress-every", "2"]
    queue = str(tmp_path / "sub_clean.queue.txt")
    done = subprocess.run(
        [*sweep, "--run-prefix", "sub", "--queue", queue],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submitit pool of 3 node(s) on sub_clean" in done.stdout, done.stdout
    lines = record_lines(env)
    assert recorded(lines) == planned()
    assert len(lines) == len(planned())  # nothing ran twice
    assert {r["host"] for r in lines} <= {"n1", "n2", "n3"}
    assert list((run_dir(env) / "logs" / "submitit").glob("*_log.out")), "no submitit task logs"

    env = pool_env(slurm, tmp_path, "stop_clean", FASTBENCH_STEP_MS="500", **knobs)
    proc = subprocess.Popen(
        [*sweep, "--run-prefix", "stop", "--queue", str(tmp_path / "stop_clean.queue.txt")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        job = job_id(env, "eval-sweep-clean", timeout=60)
        wait_for(lambda: len(record_lines(env)) >= 1, 90, "the job's first record")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    def gone() -> bool:
        listed = subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True)
        return not listed.stdout.strip()

    assert gone(), f"job {job} still queued after the orchestrator stopped:\n{out}"
    assert proc.returncode != 0
    assert 0 < len(recorded(record_lines(env))) < len(planned()), out


def test_a_submitit_job_sbatch_refuses_is_one_launch_error(
    slurm: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.config.rundir import RunDir
    from harness.launch import pools

    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    pool = pools.Pool(RunDir(tmp_path / "r"), 1, dict(slurm), "refused")
    with pytest.raises(pools.LaunchError, match=r"LAUNCHER=submitit: cannot submit the pool.s job \(.*nope"):
        pools.start(pool, "submitit", ROOT, "--partition=nope")


def test_harness_evaluate_with_launcher_submitit_runs_its_pool_as_a_slurm_job(
    slurm: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`harness.evaluate(..., knobs={"LAUNCHER": "submitit"})`: the background job submits its pool."""
    import harness

    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    ckpt = tmp_path / "ckpts" / "step_5"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text(json.dumps({"kind": "sleep"}))
    (tmp_path / "queue.txt").write_text("s1 t1\ns1 t2\n")
    knobs = {
        "LAUNCHER": "submitit", "USE_EVAL_SEEDS": "0", "RECORD_VIDEO": "0", "STAGE_ENVS": "none",
        "NODE_CACHE": str(TEST_NODE_CACHE), "CACHE_MAX_GB": TEST_CACHE_MAX_GB, "FASTBENCH_STEPS": "2",
        "HEARTBEAT_S": "1", "LEASE_TTL": "4",
    }  # fmt: skip
    handle = harness.evaluate(
        ckpt, benchmark="tests.support.fastbench:FastBench", episodes=3, policy="tests/policies/ckpt_sleep",
        queue=tmp_path / "queue.txt", nodes=2, runs_root=tmp_path / "runs", knobs=knobs,
    )  # fmt: skip
    try:
        table = handle.result(timeout=180)
    finally:
        handle.cancel()
    assert table[["task", "sr_k", "n"]].values.tolist() == [["t1", 2, 3], ["t2", 2, 3]]
    assert len(handle.episodes()) == 6
    pool_log = next((handle.run_dir / "logs").glob("pool-evaluate-*.log")).read_text()
    assert "submitit job" in pool_log and "2 node(s)" in pool_log, pool_log
    assert list((handle.run_dir / "logs" / "submitit").glob("*_log.out"))


def test_the_checkpoint_watcher_with_launcher_submitit_evaluates_each_checkpoint_as_a_job(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    ckpts = tmp_path / "ckpts"
    for step in (1000, 2000):
        (ckpts / f"step_{step}").mkdir(parents=True)
        (ckpts / f"step_{step}" / "config.json").write_text(json.dumps({"kind": "sleep"}))
    (tmp_path / "queue.txt").write_text("s1 t1\ns1 t2\n")
    env = {
        **slurm, "LAUNCHER": "submitit", "RUNS_ROOT": str(tmp_path / "runs"),
        "BENCHMARK": "tests.support.fastbench:FastBench", "POLICY": "tests/policies/ckpt_sleep",
        "USE_EVAL_SEEDS": "0", "EVAL_TEST_NUM": "2", "RECORD_VIDEO": "0", "STAGE_ENVS": "none",
        "NODE_CACHE": str(TEST_NODE_CACHE), "CACHE_MAX_GB": TEST_CACHE_MAX_GB, "FASTBENCH_STEPS": "2",
        "HEARTBEAT_S": "1", "LEASE_TTL": "4",
    }  # fmt: skip
    watch = [str(ckpts), "--queue", str(tmp_path / "queue.txt"), "--nodes", "2", "--poll", "0.3"]
    done = subprocess.run(
        ["bash", str(ROOT / "orchestrators" / "watch.sh"), *watch, "--settle", "0.5", "--once"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for step in (1000, 2000):
        run = tmp_path / "runs" / f"ckpts_step000{step}"
        lines = record_lines({"RUNS_ROOT": str(run.parent), "STUDY_RUN": run.name})
        assert sorted((r["task"], r["seed"]) for r in lines) == [("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)]
        assert f"step {step}: submitit pool of 2 node(s)" in done.stdout, done.stdout
        assert "submitit job" in next((run / "logs").glob("pool-watch-*.log")).read_text()
    curve = json.loads((tmp_path / "runs" / "ckpts_curve" / "curve.json").read_text())
    assert [p["step"] for p in curve["points"]] == [1000, 2000]


def test_cluster_up_is_idempotent_and_accounting_works(slurm: dict[str, str]) -> None:
    from support import slurm_cluster

    said: list[str] = []
    start = time.monotonic()
    slurm_cluster.up(3, log=said.append)
    assert time.monotonic() - start < 5 and "already up" in said[0]
    nodes = subprocess.run(["srun", "-N3", "hostname"], env=slurm, capture_output=True, text=True, timeout=60)
    assert sorted(nodes.stdout.split()) == ["n1", "n2", "n3"]  # per-node hostnames
    sacct = subprocess.run(
        ["sacct", "-X", "-n", "-o", "JobID,State", "-S", "now-1hours"],
        env=slurm,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert sacct.returncode == 0 and "COMPLETED" in sacct.stdout


def test_readme_srun_block_works_as_written(slurm: dict[str, str], tmp_path: Path) -> None:
    """docs/slurm.md's srun block, verbatim, with the fast double benchmark and sleep policy from the env."""
    section = (ROOT / "docs" / "slurm.md").read_text().split("# Running on a Slurm cluster", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    env = {
        **slurm,
        "RUNS_ROOT": str(tmp_path / "runs"),
        "BENCHMARK": "tests.support.fastbench:FastBench",
        "POLICY": "tests/policies/sleep",
        "RECORD_VIDEO": "0",
        "STAGE_ENVS": "none",
        "NODE_CACHE": str(TEST_NODE_CACHE),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "runs" / "pickcube_clean"
    assert {p.name for p in (run / "logs").glob("node-*.log")} == {
        "node-n1.log",
        "node-n2.log",
        "node-n3.log",
    }
    lines = record_lines({"RUNS_ROOT": str(tmp_path / "runs"), "STUDY_RUN": "pickcube_clean"})
    assert len(lines) == 4 and all(r["error"] is None for r in lines)


@pytest.mark.sim
def test_real_simulator_pool_on_two_nodes(slurm: dict[str, str], tmp_path: Path) -> None:
    """The product's default path under srun: ManiSkill3 + the replay policy on the shipped bank."""
    queue = tmp_path / "queue.txt"
    queue.write_text("table PickCube\ntable PullCube\n")
    env = {
        **slurm,
        "RUNS_ROOT": str(tmp_path / "runs"),
        "STUDY_RUN": "real",
        "POLICY": "replay",
        "EVAL_TEST_NUM": "1",
        "RECORD_VIDEO": "1",
        "STAGE_ENVS": "none",
        "NODE_CACHE": str(TEST_NODE_CACHE),
    }
    created = subprocess.run(
        [str(ROOT / "envs/sim/bin/python"), "scripts/new_run.py", "real", "--queue", str(queue)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    done = srun(env, "--nodes=2", timeout=480)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = record_lines(env)
    assert sorted((r["task"], r["success"], r["error"]) for r in lines) == [
        ("PickCube", True, None),
        ("PullCube", True, None),
    ]
    assert {r["sim_version"] for r in lines} == {"mani-skill==3.0.1 sapien==3.0.3"}
    assert {r["host"] for r in lines} <= {"n1", "n2"}
    videos = list((run_dir(env) / "eval_result").rglob("videos/seed*.mp4"))
    assert len(videos) == 2 and all(v.stat().st_size > 1000 for v in videos)


def organize(env: dict[str, str], out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    script = ROOT / "scripts" / "organize_results.py"
    argv = [env.get("SIM_PY", str(ROOT / "envs/sim/bin/python")), str(script), str(run_dir(env)), "m"]
    argv += ["--out", str(out), "--videos", "none", *extra]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def canary_said(env: dict[str, str]) -> list[str]:
    """The canary lines of the run's logs (each node's worker logs its sim process's canary)."""
    said = []
    for path in sorted((run_dir(env) / "logs").rglob("*.log")):
        said += [line for line in path.read_text(errors="replace").splitlines() if "sim: canary " in line]
    return said


def verdicts(env: dict[str, str]) -> dict[str, dict]:
    folder = run_dir(env) / "canary"
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def test_a_node_that_simulates_differently_is_named_by_its_canary_and_identical_nodes_never_are(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    """Issue 59's Slurm figure. Node n2 made to simulate differently (another simulator build whose
    physics drifts by 1e-6 per step, FASTBENCH_DRIFT_NODE): its canary differs from step 1 before its
    first unit ends, and organize_results refuses to pool, naming its group and node; --allow-mixed
    pools. Three repeated runs on identical nodes: every canary matches, organize pools (0 false
    alarms)."""
    for index in range(3):
        env = pool_env(slurm, tmp_path, f"same{index}", FASTBENCH_STEPS="2", FASTBENCH_STEP_MS="10")
        done = srun(env, "--nodes=3")
        assert done.returncode == 0, done.stdout + done.stderr
        assert recorded(record_lines(env)) == planned()
        found = verdicts(env)
        assert (run_dir(env) / "canary" / "reference.npz").exists() and found, found
        assert all(v["match"] for v in found.values()), found
        said = canary_said(env)
        assert said and not [line for line in said if "DIFFERS" in line], said
        pooled = organize(env, tmp_path / f"out-same{index}")
        assert pooled.returncode == 0, pooled.stderr
        print(
            f"same{index}: {len(said)} canary lines, {len(found)} verdict file(s), all match; organize exit 0"
        )

    env = pool_env(slurm, tmp_path, "drift", FASTBENCH_DRIFT_NODE="n2", FASTBENCH_STEP_MS="100")
    done = srun(env, "--nodes=3")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = record_lines(env)
    assert recorded(lines) == planned()
    on_n2 = [r for r in lines if r["host"] == "n2"]
    assert on_n2, Counter(r["host"] for r in lines)  # n2 ran episodes: its group is in the results
    odd = {r["fingerprint"] for r in on_n2}
    assert len(odd) == 1 and odd.isdisjoint(r["fingerprint"] for r in lines if r["host"] != "n2")
    found = verdicts(env)
    differing = {ident: v for ident, v in found.items() if not v["match"]}
    assert [v["host"] for v in differing.values()] == ["n2"], found
    (verdict,) = differing.values()
    assert verdict["first_difference"] == 1 and 0 < verdict["max_state_diff"] < 1e-4, verdict
    assert verdict["reference_host"] in ("n1", "n3"), verdict
    (ident,) = differing
    verdict_at = (run_dir(env) / "canary" / f"{ident}.json").stat().st_mtime
    first_unit_end = min(datetime.fromisoformat(r["finished_at"]).timestamp() for r in on_n2)
    assert verdict_at < first_unit_end  # n2's canary said so before its first episode ended
    said = [line for line in canary_said(env) if "DIFFERS" in line]
    assert len(said) == 1 and "first at step 1" in said[0], canary_said(env)
    refused = organize(env, tmp_path / "out-drift")
    assert refused.returncode == 2, refused.stderr
    (group,) = odd
    named = next(line for line in refused.stderr.splitlines() if "canary DIFFERS" in line)
    assert group in named and "n2" in named, refused.stderr
    print(f"drift: {said[0]}\n{named}")
    mixed = organize(env, tmp_path / "out-mixed", "--allow-mixed")
    assert mixed.returncode == 0, mixed.stderr
    assert (tmp_path / "out-mixed" / f"fingerprint-{group}").is_dir()
