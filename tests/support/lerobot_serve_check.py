"""Our model server's wrapper against LeRobot's own select_action, in LEROBOT_PY: the same tiny ACT
checkpoint, the same observation; prints one JSON line of what it found.

    $LEROBOT_PY tests/support/lerobot_serve_check.py CKPT_DIR
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.envs.utils import preprocess_observation
from lerobot.policies.factory import get_policy_class, make_pre_post_processors

from harness.model.policyload import load_policy

ckpt = sys.argv[1]
size = PreTrainedConfig.from_pretrained(ckpt).input_features["observation.image"].shape[-1]
rng = np.random.default_rng(0)
frames = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(2)]
states = [rng.normal(size=4) for _ in range(2)]

# LeRobot's own path, as lerobot-eval's rollout runs it: one env, select_action per step
cfg = PreTrainedConfig.from_pretrained(ckpt)
cfg.pretrained_path = ckpt
policy = get_policy_class(cfg.type).from_pretrained(ckpt, config=cfg).eval()
pre, post = make_pre_post_processors(cfg, pretrained_path=ckpt)
theirs = []
for frame, state in zip(frames, states, strict=True):
    policy.reset()
    obs = preprocess_observation({"pixels": frame[None], "agent_pos": state[None]})
    obs["task"] = ["close the drawer"]
    with torch.inference_mode():
        theirs.append(
            np.stack([post(policy.select_action(pre(obs))).numpy()[0] for _ in range(cfg.n_action_steps)])
        )

# ours: the wrapper loaded by our model server's loader, two sessions batched in one call
loaded = load_policy("lerobot", ckpt)
ours_single = [
    loaded.act({"images": {"corner2": f}, "proprio": s.astype(np.float32), "instruction": "x"}, 0, 0)
    for f, s in zip(frames, states, strict=True)
]
encoded = [
    loaded.module.encode_obs({"images": {"corner2": f}, "proprio": s.astype(np.float32)})
    for f, s in zip(frames, states, strict=True)
]
from harness.model.collate import collate  # noqa: E402

batched = loaded.model.generate_actions(rng_seeds=[1, 2], **collate(encoded, "lerobot"))
print(
    json.dumps(
        {
            "spec": {k: loaded.spec[k] for k in ("chunk_len", "action_dim", "action")},
            "single_max_diff": float(
                max(np.abs(a - b).max() for a, b in zip(ours_single, theirs, strict=True))
            ),
            "batched_max_diff": float(max(np.abs(batched[i] - theirs[i]).max() for i in range(2))),
            "shape": list(ours_single[0].shape),
        }
    )
)
