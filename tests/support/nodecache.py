"""The node cache that the suite's staging tests share across runs, and the bound the suite sets on it.

Shared, not a tmp dir, so that a machine stages the 3.8 GB sim env once and not once a run. But an
entry's stat key holds its source's path, so every checkout that runs the suite (each clean clone)
stages its own two sim-env entries; under the product's CACHE_MAX_GB (40) a machine that keeps
running clean clones holds ten of them. The launches the suite runs prune to this bound instead.
"""

from __future__ import annotations

import os
from pathlib import Path

TEST_NODE_CACHE = Path(os.environ.get("TEST_NODE_CACHE", "/tmp/eval-test-node-cache"))
TEST_CACHE_MAX_GB = "16"  # four sim-env entries: two checkouts' worth
