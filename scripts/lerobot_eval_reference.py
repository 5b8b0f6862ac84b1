"""The LeRobot side of the per-episode MetaWorld cross-check (scripts/lerobot_crosscheck.py runs it and
compares): episodes run by LeRobot's own evaluation on LeRobot's pinned stack (run it with
$LEROBOT_PY), written as JSONL, one line per episode: {"task", "seed", "success", "steps"}.

A LeRobot checkpoint (`--policy DIR`, a pretrained_model dir): `lerobot-eval` itself, in this process
(`lerobot.scripts.lerobot_eval.main`, given the command line `lerobot-eval --policy.path=DIR
--env.type=metaworld --env.task=TASK --eval.n_episodes=N --eval.batch_size=1 --seed=START
--output_dir=... --policy.device=cpu`), once per task. Its eval_info.json lists the task's successes
in episode order; with batch size 1, episode i is the rollout whose env `eval_policy` reset with seed
START + i. Success is LeRobot's: any step of the rollout whose `final_info` says `is_success`.
The MetaWorld oracle (`--policy oracle`, no checkpoint): LeRobot's `eval_policy`, the loop
`lerobot-eval` runs, over LeRobot's MetaWorld vector env (`make_env` of its `metaworld` env config),
with a stand-in policy that answers each step with the env's own `expert_policy` (MetaWorld's
scripted policy for the task) fed the raw 39-number observation the env turned into that step's
LeRobot observation.

How this side is aligned with ours (BENCHMARK=metaworld; docs/lerobot-crosscheck.md):
- Seeds: `honor_seeds()` (policy/lerobot/seeded_metaworld.py) makes LeRobot's `reset(seed=s)` draw
  MetaWorld variation s from the env's own RNG, as our episode seed s does; without it LeRobot's
  variation comes from numpy's global RNG, seeded once per lerobot-eval (`--seed`), so episode i
  would depend on every episode before it and on no seed of ours.
- Step limit: LeRobot's rollout stops after `_max_episode_steps` steps of its env (MetaWorld's
  `max_path_length`, 500; the env config's `episode_length` is not read for MetaWorld). `--max-steps`
  sets it, as our BENCH_PARAMS max_steps sets ours; 0 keeps 500, our default too.
- Steps: both sides count the actions applied, up to and including the first that succeeds (both
  stop there: LeRobot's env terminates on `is_success`, our episode is done on `info["success"]`).
  LeRobot does not record them, so a counter on its env's `step` does, from each seeded reset to its
  episode's termination; it changes nothing the env does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HORIZON = 500  # MetaWorld's max_path_length: a step past it raises in MetaWorld
STEPS: dict[tuple[str, int], int] = {}  # (task, seed) -> actions applied, filled by `observe_episodes`


def observe_episodes(max_steps: int) -> None:
    """Patch LeRobot's `MetaworldEnv` (once): a seeded reset starts counting its episode's steps in
    STEPS, until the env terminates or the rollout stops; the raw MetaWorld observation behind each
    LeRobot observation is kept as `raw_state`; and, with `max_steps`, `_max_episode_steps` (the limit
    LeRobot's rollout reads) is `max_steps`."""
    import numpy as np
    from lerobot.envs import metaworld as lerobot_metaworld

    env_class = lerobot_metaworld.MetaworldEnv
    if getattr(env_class, "observed", False):
        return
    init, reset, step, format_raw = (
        env_class.__init__, env_class.reset, env_class.step, env_class._format_raw_obs
    )  # fmt: skip

    def observed_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.counted = None
        if max_steps:
            self._max_episode_steps = max_steps

    def observed_reset(self: Any, seed: int | None = None, **kwargs: Any) -> Any:
        if seed is not None:  # the env's own reset after a terminal step passes none: not an episode
            self.counted = (self.task, int(seed))
            STEPS[self.counted] = 0
        return reset(self, seed=seed, **kwargs)

    def observed_step(self: Any, action: Any) -> Any:
        counted = self.counted
        result = step(self, action)
        if counted is not None:
            STEPS[counted] += 1
            if result[2] or result[3]:  # terminated or truncated: its last step
                self.counted = None
        return result

    def keep_raw(self: Any, raw_obs: Any) -> Any:
        self.raw_state = np.array(raw_obs, np.float64)
        return format_raw(self, raw_obs)

    env_class.__init__, env_class.reset, env_class.step = observed_init, observed_reset, observed_step
    env_class._format_raw_obs = keep_raw
    env_class.observed = True


def lerobot_eval_episodes(ckpt: Path, task: str, episodes: int, start_seed: int, out: Path) -> list[dict]:
    """`lerobot-eval` of checkpoint `ckpt` on `task`, episodes seeded start_seed.. in order."""
    from lerobot.scripts import lerobot_eval

    out.mkdir(parents=True, exist_ok=True)
    argv = [
        "lerobot-eval", f"--policy.path={ckpt}", "--env.type=metaworld", f"--env.task={task}",
        f"--eval.n_episodes={episodes}", "--eval.batch_size=1", f"--seed={start_seed}",
        f"--output_dir={out}", "--policy.device=cpu",
    ]  # fmt: skip
    saved, sys.argv = sys.argv, argv
    try:
        lerobot_eval.main()
    finally:
        sys.argv = saved
    info = json.loads((out / "eval_info.json").read_text())
    (per_task,) = info["per_task"]
    successes = per_task["metrics"]["successes"]
    if len(successes) != episodes:
        raise RuntimeError(
            f"lerobot-eval {task}: {len(successes)} episodes in eval_info.json, not {episodes}"
        )
    seeds = range(start_seed, start_seed + episodes)  # eval_policy: batch b of size 1 is seed start + b
    return [episode_line(task, seed, success) for seed, success in zip(seeds, successes, strict=True)]


def oracle_episodes(task: str, episodes: int, start_seed: int) -> list[dict]:
    """LeRobot's `eval_policy` over its MetaWorld vector env, the scripted expert as its policy. Its
    frames are blank: the expert reads none, and rendering (230 ms a 480 px frame on a busy CPU)
    reads the simulation without moving it, as our oracle runs render none (BENCH_PARAMS cameras: [])."""
    import numpy as np
    from lerobot.envs.configs import MetaworldEnv as MetaworldConfig
    from lerobot.envs.factory import make_env
    from lerobot.envs.utils import close_envs
    from lerobot.processor import PolicyProcessorPipeline
    from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action
    from lerobot.scripts.lerobot_eval import eval_policy
    from lerobot.utils.random_utils import set_seed

    set_seed(start_seed)  # as lerobot-eval does with its --seed
    envs = make_env(MetaworldConfig(task=task), n_envs=1)
    try:
        (vec_env,) = envs[task].values()
        for env in vec_env.envs:  # the expert reads no frame: render none (a frame moves nothing)
            blank = np.zeros(env.observation_space["pixels"].shape, np.uint8)
            env._env.render = blank.copy
        identity = PolicyProcessorPipeline(steps=[])  # observations: env and policy pre-processing
        actions = PolicyProcessorPipeline(  # the policy's post-processing: no unnormalising
            steps=[], to_transition=policy_action_to_transition, to_output=transition_to_policy_action
        )
        info = eval_policy(
            vec_env, scripted_expert(vec_env), identity, identity, identity, actions,
            n_episodes=episodes, start_seed=start_seed,
        )  # fmt: skip
    finally:
        close_envs(envs)
    return [episode_line(task, ep["seed"], ep["success"]) for ep in info["per_episode"]]


def episode_line(task: str, seed: int, success: bool) -> dict:
    return {"task": task, "seed": int(seed), "success": bool(success), "steps": STEPS.get((task, int(seed)))}


def scripted_expert(vec_env: Any) -> Any:
    """A LeRobot policy (what `eval_policy` takes) that plays each sub-env's `expert_policy` on the raw
    MetaWorld observation that sub-env last returned (`raw_state`, kept by `observe_episodes`)."""
    import numpy as np
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.pretrained import PreTrainedPolicy

    def untrainable(*_: Any) -> Any:  # LeRobot's abstract training hooks: a scripted policy has none
        raise TypeError("the MetaWorld scripted expert is evaluated, never trained")

    class ExpertConfig(PreTrainedConfig):
        observation_delta_indices = action_delta_indices = reward_delta_indices = None
        get_optimizer_preset = untrainable

        def get_scheduler_preset(self) -> Any:
            return None

        def validate_features(self) -> None:
            pass

    class ScriptedExpert(PreTrainedPolicy):
        config_class, name = ExpertConfig, "metaworld_scripted_expert"

        def __init__(self) -> None:
            super().__init__(ExpertConfig(device="cpu"))

        def select_action(self, batch: dict, **kwargs: Any) -> torch.Tensor:
            # a copy per call: some scripted policies (door-open-v3) write into views of their input
            actions = [env.expert_policy.get_action(env.raw_state.copy()) for env in vec_env.envs]
            return torch.from_numpy(np.asarray(actions, np.float32))

        def reset(self) -> None:
            """Nothing to reset: MetaWorld's scripted policies keep no state."""

        def predict_action_chunk(self, batch: dict, **kwargs: Any) -> torch.Tensor:
            return self.select_action(batch)[:, None]

        forward = get_optim_params = untrainable

    return ScriptedExpert()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True, help="`oracle`, or a LeRobot pretrained_model dir")
    p.add_argument("--tasks", required=True, help="MetaWorld env names, comma-separated (push-v3,...)")
    p.add_argument("--episodes", type=int, required=True, help="episodes per task: seeds START..START+N-1")
    p.add_argument("--start-seed", type=int, default=0, help="the first seed (lerobot-eval's --seed)")
    p.add_argument("--max-steps", type=int, default=0, help=f"step limit, 1..{HORIZON}; 0: {HORIZON}")
    p.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    p.add_argument("--work", type=Path, help="lerobot-eval's output dirs (default: beside --out)")
    args = p.parse_args()
    if not 0 <= args.max_steps <= HORIZON:
        p.error(f"--max-steps {args.max_steps}: expected 0 (MetaWorld's {HORIZON}) to {HORIZON}")
    if args.policy != "oracle" and not (Path(args.policy) / "config.json").is_file():
        p.error(f"--policy {args.policy}: neither `oracle` nor a LeRobot pretrained_model dir (config.json)")
    import warnings

    from policy.lerobot.seeded_metaworld import honor_seeds

    warnings.filterwarnings("ignore", module="metaworld")  # the scripted policies' clipping warnings
    honor_seeds()
    observe_episodes(args.max_steps)
    work = args.work or args.out.with_suffix(".lerobot-eval")
    lines = []
    for task in args.tasks.split(","):
        if args.policy == "oracle":
            lines += oracle_episodes(task, args.episodes, args.start_seed)
        else:
            lines += lerobot_eval_episodes(
                Path(args.policy), task, args.episodes, args.start_seed, work / task
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    from harness.process.failures import run_command

    sys.exit(run_command("lerobot_eval_reference", main))
