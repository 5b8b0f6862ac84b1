"""Where a request's randomness comes from: a seed from what it asks, never from when it came.

`rng_seed(task, task_config, seed, step)` is the one seed of a request. A batching wrapper gets it as
`rng_seeds` (one per request) and draws from a generator of its own per request; a wrapper without
`max_batch` is served one request per call with the global RNGs seeded first (`seed_global_rngs`).
"""

from __future__ import annotations

import hashlib
import random
import sys

import numpy as np


def rng_seed(task: str, task_config: str, seed: int, step: int) -> int:
    """A 32-bit RNG seed from (task, task_config, episode seed, step): a request's draw depends on what
    it asks, never on how requests from different sessions interleave or are batched."""
    key = f"{task}\0{task_config}\0{seed}\0{step}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big")


def seed_global_rngs(value: int) -> None:
    """Seed Python's, numpy's and (when loaded) torch's global RNGs, for a one-request call."""
    random.seed(value)
    np.random.seed(value)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(value)
