"""A quick sanity rollout of a LeRobot checkpoint on LeRobot's MetaWorld env: run in the LeRobot env.

Not the evaluation (that is `POLICY=lerobot` through the harness): a short loop, seeds 0..N-1 per
task through `MetaworldEnv` with `honor_seeds()` (episode s is our benchmark's episode s), the policy
and its processors loaded as LeRobot loads them (`from_pretrained`, `make_pre_post_processors`), and
observations converted by LeRobot's `preprocess_observation`, as `lerobot-eval` feeds them.

Example:
  MUJOCO_GL=egl $LEROBOT_PY scripts/lerobot_sanity_rollout.py checkpoints/lerobot-act-metaworld \
    --tasks drawer-close-v3,button-press-topdown-v3,window-close-v3 --seeds 5 --max-steps 200
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a pretrained_model dir")
    p.add_argument("--tasks", required=True, help="comma-separated MetaWorld tasks")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 per task")
    p.add_argument("--max-steps", type=int, default=200, help="steps before an episode counts as failed")
    args = p.parse_args(argv)

    import torch
    from lerobot.envs.metaworld import MetaworldEnv
    from lerobot.envs.utils import preprocess_observation
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    from policy.lerobot.seeded_metaworld import honor_seeds

    honor_seeds()
    policy = ACTPolicy.from_pretrained(args.checkpoint).eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=args.checkpoint)
    for task in args.tasks.split(","):
        env = MetaworldEnv(task, obs_type="pixels_agent_pos")
        successes = []
        for seed in range(args.seeds):
            start = time.monotonic()
            obs, _ = env.reset(seed=seed)
            policy.reset()
            success, step = False, 0
            while step < args.max_steps:
                step += 1
                batch = pre(preprocess_observation({k: v[None] for k, v in obs.items()}))
                with torch.no_grad():
                    action = post(policy.select_action(batch))[0].numpy()
                obs, _, terminated, _, info = env.step(action)
                if info["is_success"] or terminated:
                    success = bool(info["is_success"])
                    break
            successes.append(success)
            print(f"{task} seed {seed}: {'success' if success else 'failure'} after {step} steps "
                  f"({time.monotonic() - start:.0f}s)", file=sys.stderr, flush=True)  # fmt: skip
        env.close()
        print(f"{task}: {sum(successes)}/{len(successes)} successes (seeds 0..{args.seeds - 1})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
