"""Joining the `encode_obs` outputs of several requests into one batch of `generate_actions` inputs.

The rule a batching wrapper relies on (see the README's policy interface): `encode_obs` gives each
array or tensor a leading batch axis of 1; the batch concatenates those along axis 0 (so B requests
give [B, ...]); any other value (a string, a dict, a number) becomes a list of the B values in the
batch's order. Every request must give the same keys, and arrays of one key the same trailing shape.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from harness.process.failures import Refused


class CollateError(Refused):
    """Requests whose inputs cannot be joined into one batch."""


def collate(inputs: list[dict[str, Any]], policy: str) -> dict[str, Any]:
    """One kwargs dict for `generate_actions` from the per-request `inputs` (see the module doc)."""
    keys = list(inputs[0])
    for other in inputs[1:]:
        if sorted(other) != sorted(keys):
            raise CollateError(
                f"{policy}.encode_obs gave different keys in one batch: {sorted(keys)} vs {sorted(other)}"
            )
    return {key: _join(key, [item[key] for item in inputs], policy) for key in keys}


def _join(key: str, values: list[Any], policy: str) -> Any:
    torch = sys.modules.get("torch")
    if len(values) == 1:  # a batch of one: nothing to join, only its batch axis to check
        (value,) = values
        if not (isinstance(value, np.ndarray) or (torch is not None and isinstance(value, torch.Tensor))):
            return values
        _same_rows(key, [tuple(value.shape)], policy)
        return value
    if all(isinstance(v, np.ndarray) for v in values):
        _same_rows(key, [v.shape for v in values], policy)
        return np.concatenate(values, axis=0)
    if torch is not None and all(isinstance(v, torch.Tensor) for v in values):
        _same_rows(key, [tuple(v.shape) for v in values], policy)
        return torch.cat(values, dim=0)
    return list(values)


def _same_rows(key: str, shapes: list[tuple[int, ...]], policy: str) -> None:
    if any(len(shape) == 0 or shape[0] != 1 for shape in shapes):
        raise CollateError(
            f"{policy}.encode_obs: {key!r} has shape {shapes[0] if shapes else ()}; a batching wrapper "
            "gives every array a leading batch axis of 1"
        )
    if len({shape[1:] for shape in shapes}) > 1:
        raise CollateError(f"{policy}.encode_obs: {key!r} differs in shape within one batch: {shapes}")
