"""A batcher's statistics, apart from its scheduling (harness/model/batcher.py): the server logs
them, and a front end's ping answers with them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class BatchStats:
    """What the batcher did: model calls, requests answered, and how many calls had each size."""

    calls: int = 0
    items: int = 0
    sizes: Counter[int] = field(default_factory=Counter)
    busy_s: float = 0.0  # time spent in model calls: busy_s / wall time is the model's utilisation

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "items": self.items,
            "max": max(self.sizes, default=0),
            "sizes": {str(size): n for size, n in sorted(self.sizes.items())},
            "busy_s": round(self.busy_s, 6),
        }

    def line(self) -> str:
        """One parseable line: `calls=C items=N max=M sizes=1:a,2:b busy_s=S` (size:count)."""
        sizes = ",".join(f"{size}:{n}" for size, n in sorted(self.sizes.items())) or "-"
        return (
            f"calls={self.calls} items={self.items} max={max(self.sizes, default=0)} sizes={sizes} "
            f"busy_s={self.busy_s:.3f}"
        )
