"""Where a request's randomness comes from: a seed from what it asks, never from when it came.

`rng_seed(task, task_config, seed, step)` is the one seed of a request. A batching wrapper gets it as
`rng_seeds` (one per request) and draws from a generator of its own per request; a wrapper without
`max_batch` is served one request per call with the global RNGs seeded first (`seed_global_rngs`).
A batching wrapper that takes no `rng_seeds` must say it draws nothing (`deterministic: true`), else
it is refused at load (`check_batched_seeding`): one call serves several requests, so no global
seed can be per request, and its draws would depend on what each request was batched with.
"""

from __future__ import annotations

import hashlib
import inspect
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness.model.wrapper import PolicyRefused


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


def check_batched_seeding(
    policy: str, generate_actions: Callable[..., Any], usr_args: dict[str, Any], yml: Path
) -> None:
    """Refuse a batched wrapper whose `generate_actions` takes no `rng_seeds` unless its settings
    declare `deterministic: true` (it draws no random numbers); the error names the wrapper and both fixes."""
    deterministic = usr_args.get("deterministic", False)
    if not isinstance(deterministic, bool):
        raise PolicyRefused(
            f"policy {policy}: setting 'deterministic' must be true or false in {yml} or --set, "
            f"got {deterministic!r}"
        )
    if deterministic or "rng_seeds" in inspect.signature(generate_actions).parameters:
        return
    raise PolicyRefused(
        f"policy {policy}: batched (max_batch in {yml} or --set) but {policy}.generate_actions takes no "
        "rng_seeds, so nothing would seed its random draws per request; add an `rng_seeds` parameter "
        "(one seed per request, e.g. draw from np.random.default_rng(seed)), or, if it draws no random "
        f"numbers, set `deterministic: true` in {yml}"
    )
