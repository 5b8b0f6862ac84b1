"""The orchestrators' parts that need no pool: launch commands, settings, caller checks, progress."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.config import contract, create
from harness.config import manifest as mf
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.records import RECORD_FIELDS, append_record
from harness.launch import pools
from harness.launch.drive import PoolLaunch, check_caller_env, launch_env
from harness.launch.parallel import model_run_name
from harness.launch.progress import progress, results_table


@pytest.fixture
def made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RunDir, mf.Manifest, dict[str, str]]:
    monkeypatch.setattr(contract, "CODE_ROOT", tmp_path)
    bundle = tmp_path / "bundle"
    monkeypatch.setenv("BUNDLE", str(bundle))
    for task in ("pick", "stack"):
        (bundle / "bank" / task).mkdir(parents=True)
        (bundle / "bank" / task / "s1_clean.txt").write_text("7 8 9")
    queue = tmp_path / "q.txt"
    queue.write_text("s1 pick\ns1 stack\n")
    env = {
        "BUNDLE": str(bundle), "SEEDS_ROOT": "bank", "EVAL_TEST_NUM": "2", "BENCH_CONFIG": "clean",
        "BENCHMARK": "tests.support.fastbench:FastBench",
    }  # fmt: skip
    run = RunDir(tmp_path / "runs" / "r")
    return run, create.create_run(run.root, queue, env), env


def record(task: str, seed: int, success: bool, error: str | None = None) -> dict:
    rec = dict.fromkeys(RECORD_FIELDS)
    rec.update(
        task=task, scene="s1", task_config="s1_clean", seed=seed, success=success, hard_success=success
    )
    rec.update(error=error, finished_at=f"2025-01-01T00:00:0{seed}", contract="c", policy="p", ckpt="")
    return rec


def test_node_commands() -> None:
    pool = pools.Pool(RunDir(Path("/r/x")), 3, {"A": "1"}, "sweep-clean")
    [(srun, env)] = pools.node_commands(pool, "srun", Path("/e"), "--partition=gpu -t 60")
    assert srun[:5] == [
        "srun",
        "--nodes=3",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
        "--job-name=eval-sweep-clean",
    ]
    assert srun[5:] == ["--partition=gpu", "-t", "60", "bash", "/e/slurm/eval_node.sh"] and env == {"A": "1"}
    local = pools.node_commands(pool, "local", Path("/e"), "")
    assert [cmd for cmd, _ in local] == [["bash", "/e/slurm/eval_node.sh"]] * 3
    names = [env["NODE_NAME"] for _, env in local]
    assert len(set(names)) == 3 and all(n.startswith("sweep-clean-p") for n in names)
    with pytest.raises(pools.LaunchError, match="LAUNCHER='ssh': expected one of local, srun, submitit"):
        pools.node_commands(pool, "ssh", Path("/e"), "")


def test_an_unknown_launcher_is_refused_naming_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="LAUNCHER='slurm': expected one of local, srun, submitit"):
        Settings.from_env({"LAUNCHER": "slurm"})
    assert Settings.from_env({"LAUNCHER": "submitit"}).launcher == "submitit"
    pool = pools.Pool(RunDir(tmp_path / "r"), 1, {}, "x")
    with pytest.raises(pools.LaunchError, match="LAUNCHER='ssh': expected one of local, srun, submitit"):
        pools.start(pool, "ssh", tmp_path)


def test_srun_args_become_the_submitit_jobs_sbatch_options() -> None:
    args = "--partition=gpu --gres gpu:1 --exclusive -t 60 -Aproj --mem=8G"
    assert pools.sbatch_options(args) == {
        "partition": "gpu",
        "gres": "gpu:1",
        "exclusive": True,
        "time": "60",
        "account": "proj",
        "mem": "8G",
    }
    assert pools.sbatch_options("") == {}
    with pytest.raises(pools.LaunchError, match="SRUN_ARGS '-N': expected sbatch options"):
        pools.sbatch_options("-N 3")
    with pytest.raises(pools.LaunchError, match="SRUN_ARGS '-p' has no value"):
        pools.sbatch_options("-p")


def test_a_node_task_gets_the_pool_env_less_what_slurm_sets_per_node() -> None:
    env = {
        "STUDY_RUN": "r", "PATH": "/bin", "SLURM_CONF": "/c", "SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n1",
        "CUDA_VISIBLE_DEVICES": "0", "NODE_NAME": "me", "SUBMITIT_FOLDER": "/f",
    }  # fmt: skip
    assert pools.node_env(env) == {"STUDY_RUN": "r", "PATH": "/bin", "SLURM_CONF": "/c"}


class FakeJob:
    """A submitit job's face as Started sees it: done(), its tasks' results, Slurm's state."""

    def __init__(self, results: list[object], state: str = "COMPLETED") -> None:
        self.results, self.state, self.num_tasks, self.ended = results, state, len(results), False

    def done(self) -> bool:
        return self.ended

    def task(self, i: int) -> FakeJob:
        return FakeJob([self.results[i]])

    def result(self) -> object:
        if isinstance(self.results[0], Exception):
            raise self.results[0]
        return self.results[0]

    def get_info(self, mode: str = "force") -> dict[str, str]:
        return {"State": self.state}


@pytest.mark.parametrize(
    ("results", "state", "code"),
    [
        ([{"rc": 0}, {"rc": 0}], "COMPLETED", 0),
        ([{"rc": 0}, {"rc": 3}], "COMPLETED", 3),
        ([{"rc": 0}, RuntimeError("killed\nmore")], "FAILED", 1),
        ([{"rc": 0}, {"rc": 0}], "CANCELLED by 7", 1),
    ],
)
def test_a_submitit_pool_polls_none_until_its_job_ends_then_its_status(results, state, code) -> None:
    job = FakeJob(results, state)
    started = pools.Started(job=job)  # type: ignore[arg-type]
    assert started.poll() is None
    job.ended = True
    assert started.poll() == code


def test_pool_launch_takes_the_knobs_and_the_nodes_flag() -> None:
    assert PoolLaunch.of(Settings.from_env({"LAUNCHER": "srun", "POOL_NODES": "4"}), {}, None, 5).nodes == 4
    launch = PoolLaunch.of(Settings.from_env({}), {"EVAL_ROOT": "/e"}, 2, 5)
    assert (launch.launcher, launch.nodes, launch.eval_root) == ("local", 2, Path("/e"))
    with pytest.raises(ValueError, match="LAUNCHER='slurm'"):
        Settings.from_env({"LAUNCHER": "slurm"})
    with pytest.raises(ValueError, match="POOL_NODES='two'"):
        Settings.from_env({"POOL_NODES": "two"})


def test_caller_env_must_agree_and_launch_env_freezes_knobs(made) -> None:
    run, manifest, env = made
    check_caller_env(manifest, {**env, "LEASE_TTL": "3"}, run)
    with pytest.raises(
        mf.ContractMismatch, match=re.escape("knob ACTION_SMOOTH: run.yaml has '0', this launch has '0.7'")
    ):
        check_caller_env(manifest, {**env, "ACTION_SMOOTH": "0.7"}, run)
    launched = launch_env(run, manifest, {"PATH": "/bin", "EXEC_ACTIONS": "5", "RUN_DIR": "/elsewhere"})
    assert launched["EXEC_ACTIONS"] == "0" and launched["PATH"] == "/bin" and "RUN_DIR" not in launched
    assert (launched["STUDY_RUN"], launched["RUNS_ROOT"]) == ("r", str(run.root.parent))
    assert launched["EVAL_TEST_NUM"] == "2"


def test_progress_counts_trials_and_errors(made) -> None:
    run, manifest, env = made
    assert progress(run, manifest, env).line() == "0/4 episodes, 0/2 units"
    out = run.result_dir("pick", "p", "s1_clean", "") / "_metrics.w1.jsonl"
    append_record(out, record("pick", 7, True))
    append_record(out, record("pick", 8, False))
    append_record(out, record("stack", 7, False, error="sim crashed"))
    append_record(out, record("stack", 9, True))  # not planned (EVAL_TEST_NUM=2): ignored
    now = progress(run, manifest, env)
    assert (now.done, now.planned, now.units_done, now.errored, now.complete) == (2, 4, 1, 1, False)
    table = results_table([("clean", run, manifest)], "config")
    assert "50.0% [" in table and "3/4" in table and table.splitlines()[0].startswith("config")


def test_model_run_names() -> None:
    assert model_run_name("cmp", "tests/policies/sleep:/ck/m1") == (
        "cmp_tests-policies-sleep_m1",
        "tests/policies/sleep",
        "/ck/m1",
    )
    assert model_run_name("cmp", "hold") == ("cmp_hold", "hold", "")
    with pytest.raises(ValueError, match="expected POLICY"):
        model_run_name("cmp", ":ck")
