"""The training data's card and the rule that training seeds never overlap the seed bank.

The card (`data_card.json` beside the data, copied into the checkpoint's model card) records the seed
range, tasks and demos the policy learned from; `overlap` is what the collector refuses on and what
the disjointness test asserts over the shipped card and the shipped bank.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CARD_NAME = "data_card.json"


def eval_seeds(bank_root: Path) -> dict[str, set[int]]:
    """Every seed of every `<task>/<task_config>.txt` under the eval bank, by task."""
    seeds: dict[str, set[int]] = {}
    files = sorted(Path(bank_root).glob("*/*.txt"))
    if not files:
        raise ValueError(f"seed bank {bank_root}: no <task>/<task_config>.txt files")
    for path in files:
        try:
            values = {int(s) for s in path.read_text().split()}
        except ValueError:
            raise ValueError(f"{path}: not a list of integer seeds") from None
        seeds.setdefault(path.parent.name, set()).update(values)
    return seeds


def overlap(seed_range: tuple[int, int], bank_root: Path) -> list[tuple[str, int]]:
    """(task, seed) pairs of the eval bank inside the half-open training range [start, stop)."""
    start, stop = seed_range
    return sorted(
        (task, s) for task, values in eval_seeds(bank_root).items() for s in values if start <= s < stop
    )


def check_disjoint(seed_range: tuple[int, int], bank_root: Path) -> None:
    clash = overlap(seed_range, bank_root)
    if clash:
        shown = ", ".join(f"{t} seed {s}" for t, s in clash[:5])
        raise ValueError(
            f"training seeds [{seed_range[0]}, {seed_range[1]}) overlap the eval bank {bank_root}: {shown}"
        )


def read_card(path: Path) -> dict[str, Any]:
    try:
        card = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"data card {path}: cannot read it: {exc}") from None
    for key in ("seed_range", "tasks", "demos"):
        if key not in card:
            raise ValueError(f"data card {path}: no {key!r}")
    return card


def write_card(path: Path, card: dict[str, Any]) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(card, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
