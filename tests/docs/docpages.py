"""The documentation pages as the docs tests read them: README.md and docs/*.md, their headings'
GitHub anchors, their links, the tables under a heading, and the command blocks marked runnable."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
RUNNABLE = re.compile(r"^<!--\s*runnable(?::\s*slow\s*\((?P<reason>.*)\))?\s*-->\s*$")


def pages() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation gone, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters, digits and '_'
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of `path`, duplicates numbered as GitHub does (`x`, `x-1`, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text()):
        if match := HEADING.match(line):
            base = anchor(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link and image outside code blocks and inline code."""
    out = []
    for number, line in prose_lines(path.read_text()):
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            out.append((number, match.group(1) or match.group(2)))
    return out


def section(path: Path, heading: str) -> str:
    """The text under the heading whose title is `heading`, up to the next heading of its level or above."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        match = HEADING.match(line)
        if match and match.group(2) == heading:
            level = len(match.group(1))
            body = []
            for later in lines[i + 1 :]:
                other = HEADING.match(later)
                if other and len(other.group(1)) <= level:
                    break
                body.append(later)
            return "\n".join(body)
    raise AssertionError(f"{path.relative_to(ROOT)}: no heading {heading!r}")


def first_column(text: str) -> list[str]:
    """The first cell of every table row in `text`, header and rule rows left out, backticks stripped."""
    rows = [line for line in text.splitlines() if line.strip().startswith("|")]
    cells = [row.strip().strip("|").split("|")[0].strip() for row in rows[2:] if not set(row) <= set("|-: ")]
    return [cell.strip("`") for cell in cells if not re.fullmatch(r"-+", cell)]


def tables(text: str) -> list[str]:
    """Each markdown table of `text`, as its own text."""
    out, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.strip().startswith("|"):
            current.append(line)
        elif current:
            out.append("\n".join(current))
            current = []
    return out


@dataclass(frozen=True)
class Block:
    """A bash block marked runnable: where it is, its text, and why it is skipped (None: it runs)."""

    page: str
    line: int
    code: str
    slow: str | None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def runnable_blocks() -> list[Block]:
    """Every ```bash block right after a `<!-- runnable -->` or `<!-- runnable: slow (why) -->` line."""
    out = []
    for path in pages():
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            match = RUNNABLE.match(line.strip())
            if not match:
                continue
            assert i + 1 < len(lines) and lines[i + 1].strip() == "```bash", (
                f"{path.relative_to(ROOT)}:{i + 1}: a runnable mark must come right before a ```bash fence"
            )
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            code = "\n".join(lines[i + 2 : end])
            out.append(Block(str(path.relative_to(ROOT)), i + 2, code, match.group("reason")))
    return out
