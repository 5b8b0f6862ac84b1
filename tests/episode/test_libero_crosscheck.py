"""The per-episode cross-check against vla-eval's own runner (issue 21): the same deterministic
policies (the LIBERO oracle, and its seeded noisy variant `noise_std`) on the same init states, run
once by `vla-eval run` (its orchestrator, sync runner and `LIBEROBenchmark`, talking vla-eval's
WebSocket protocol to our model server in MODEL_SERVER_PROTOCOL=vlaeval) and once by our worker
(BENCHMARK=libero): identical success and step count per (task, init state); a mismatch names the
episode. The four runs go side by side (about 4 min of CPU: vla-eval renders two cameras a step).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.poolkit import REPO
from support.vlaeval_libero import (
    Outcomes,
    pool_argv,
    pool_outcomes,
    start_vlaeval_run,
    start_vlaeval_server,
    vlaeval_config,
    vlaeval_outcomes,
)
from support.wirekit import stop_process

TASKS = [  # two of libero_object's quickest for the oracle (~110 steps)
    "pick up the bbq sauce and place it in the basket",
    "pick up the orange juice and place it in the basket",
]
INIT_STATES = 1  # init states 0..INIT_STATES-1 of each task (vla-eval runs episodes 0..N-1)
MAX_STEPS = 150  # both sides' step limit: the oracle needs ~110, a failing episode stops here
VARIANTS = {"oracle": "", "noisy": "noise_std=0.3"}  # POLICY_ARGS of each policy
TIMEOUT_S = 1800  # a slow, shared machine: the runs take ~3 min when it is quiet


def mismatches(variant: str, theirs: Outcomes, ours: Outcomes) -> list[str]:
    """One line per episode whose outcome differs, or that only one side ran."""
    lines = []
    for key in sorted(set(theirs) | set(ours)):
        if theirs.get(key) != ours.get(key):
            task, init = key
            lines.append(
                f"{variant} {task!r} init state {init}: vla-eval (success, steps) {theirs.get(key)}, "
                f"ours {ours.get(key)}"
            )
    return lines


@pytest.mark.sim
def test_vla_eval_runner_and_our_worker_agree_per_episode(tmp_path: Path) -> None:
    servers, runs = [], []
    try:
        for variant, policy_args in VARIANTS.items():
            work = tmp_path / variant
            work.mkdir()
            server, url = start_vlaeval_server(work, policy_args)
            servers.append(server)
            config = vlaeval_config(url, TASKS, INIT_STATES, MAX_STEPS, work / "theirs")
            runs.append(start_vlaeval_run(config, work / "vla-eval.log"))
            argv, env = pool_argv(work, "ours", TASKS, INIT_STATES, MAX_STEPS, policy_args)
            with (work / "ours.log").open("w") as log:
                runs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO))
        for run in runs:
            run.wait(TIMEOUT_S)
        logs = {path.name: path.read_text()[-2000:] for path in tmp_path.glob("*/*.log")}
        assert all(run.returncode == 0 for run in runs), logs
        found, outcomes = [], {}
        for variant in VARIANTS:
            theirs = vlaeval_outcomes(tmp_path / variant / "theirs")
            ours = pool_outcomes(tmp_path / variant / "ours")
            assert len(theirs) == len(TASKS) * INIT_STATES, theirs
            found += mismatches(variant, theirs, ours)
            print(f"{variant}: (success, steps) by (task, init state): vla-eval {theirs}; ours {ours}")
            outcomes[variant] = ours
        assert not found, "\n".join(found)
        assert all(success for success, _ in outcomes["oracle"].values()), outcomes
        assert outcomes["noisy"] != outcomes["oracle"], outcomes  # the noise changes the episodes
    finally:
        for proc in [*runs, *servers]:
            if proc.poll() is None:
                stop_process(proc)


def test_a_mismatch_names_the_episode() -> None:
    task = TASKS[0]
    theirs = {(task, 0): (True, 107), (task, 1): (False, 150)}
    ours = {(task, 0): (True, 107), (task, 1): (True, 131)}
    assert mismatches("noisy", theirs, ours) == [
        f"noisy {task!r} init state 1: vla-eval (success, steps) (False, 150), ours (True, 131)"
    ]
    assert mismatches("oracle", theirs, {(task, 0): (True, 107)})[0].endswith("ours None")
