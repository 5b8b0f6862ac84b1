"""Every relative link and #anchor in README.md and docs/*.md resolves, GitHub-style, and the README
stays a front page: short, linking every page under docs/."""

from __future__ import annotations

from pathlib import Path

from docpages import DOCS, ROOT, anchor, anchors, links, pages

README_MAX_LINES = 300


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in pages():
        for line, target in links(page):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            file, _, fragment = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            where = f"{page.relative_to(ROOT)}:{line}: {target}"
            if not dest.exists():
                broken.append(f"{where}: no file {dest}")
            elif fragment and (dest.suffix != ".md" or fragment not in anchors(dest)):
                broken.append(f"{where}: no heading with anchor #{fragment} in {dest.relative_to(ROOT)}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_anchors_are_github_style() -> None:
    assert anchor("Quick start: two commands on a fresh Debian 12 machine (as root)") == (
        "quick-start-two-commands-on-a-fresh-debian-12-machine-as-root"
    )
    assert anchor("The worker (`slurm/eval_worker.sh` → `harness/worker/loop.py`)") == (
        "the-worker-slurmeval_workersh--harnessworkerlooppy"
    )


def test_readme_is_a_front_page_that_reaches_every_page() -> None:
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= README_MAX_LINES
    linked = {Path(target.partition("#")[0]).name for _, target in links(readme)}
    unlinked = sorted(p.name for p in DOCS.glob("*.md") if p.name not in linked)
    assert not unlinked, f"README.md links no page {unlinked}: every topic should be one click away"


def test_no_page_repeats_another() -> None:
    """A paragraph line of 60+ characters appears on one page only (tables and code left out)."""
    from docpages import prose_lines

    seen: dict[str, str] = {}
    repeated = []
    for page in pages():
        for number, line in prose_lines(page.read_text()):
            text = line.strip()
            if len(text) < 60 or text.startswith(("|", "<!--")):
                continue
            where = f"{page.relative_to(ROOT)}:{number}"
            if text in seen and not seen[text].startswith(f"{page.relative_to(ROOT)}:"):
                repeated.append(f"{where} repeats {seen[text]}: {text[:80]}")
            seen.setdefault(text, where)
    assert not repeated, "\n".join(repeated)
