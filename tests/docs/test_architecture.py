"""docs/architecture.md's count of the files on an episode's path is what its command prints, and
the diagram shows every stage with its package and every process."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree

from docpages import DOCS
from episode_path import episode_path_files

STAGES = ("harness/node", "harness/worker", "harness/queue", "harness/episode", "harness/wire",
          "harness/model", "harness/results")  # fmt: skip
PROCESSES = ("node script", "worker", "sim process", "model server")


def test_stated_file_count_is_the_counted_one() -> None:
    text = (DOCS / "architecture.md").read_text()
    stated = re.search(r"An episode passes through \*\*(\d+) files\*\*", text)
    assert stated, "docs/architecture.md no longer states the count"
    counted = len(episode_path_files())
    assert int(stated.group(1)) == counted, (
        f"docs/architecture.md says {stated.group(1)} files, "
        f"`$SIM_PY tests/docs/episode_path.py` counts {counted}"
    )


def test_the_diagram_shows_each_stage_and_process() -> None:
    svg = ElementTree.parse(DOCS / "architecture.svg")
    texts = " ".join(t.text or "" for t in svg.iter() if t.tag.endswith("text"))
    missing = [name for name in (*STAGES, *PROCESSES) if name not in texts]
    assert not missing, f"docs/architecture.svg does not show {missing}"
