"""report.html renders in headless Chromium: tables, the chart image (decoded), and episode video links."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.results.organize import Options, organize
from support.results_fixtures import new_run, record, write_records

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Appended to a copy of the page: records what the browser actually decoded, for --dump-dom to show.
PROBE = (
    "<script>window.addEventListener('load',()=>{document.body.dataset.imgs="
    "[...document.images].map(i=>i.naturalWidth).join(',')})</script>"
)


def _chromium(tmp_path: Path, *args: str) -> str:
    profile = tmp_path / "chromium-profile"
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_report_renders_in_chromium(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    records = [record("table", "pick_cube", s, s < 7, s < 5) for s in range(10)]
    records += [
        record("table", "push_cube", s, s < 2, error="sim crashed" if s == 9 else None) for s in range(10)
    ]
    write_records(run, records)
    [out] = organize(Options(str(run.root), "m1", tmp_path / "out"), lambda _: None)
    probe = out / "probe.html"
    probe.write_text((out / "report.html").read_text().replace("</body>", PROBE + "</body>"))
    dom = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri())
    widths = re.search(r'data-imgs="([^"]*)"', dom)
    assert widths and all(int(w) > 0 for w in widths.group(1).split(",")), "chart image did not decode"
    # scenes: head, table, TOTAL; node fingerprints: head + the one unknown group; tasks: head + 2
    assert 'id="scenes"' in dom and 'id="nodes"' in dom and dom.count("<tr") == 3 + 2 + 3
    links = re.findall(r'<a class="ep (\w+)"[^>]*href="([^"]+)"', dom)
    assert len(links) == 20 and all((out / href).is_file() for _, href in links)
    pick = [kind for kind, href in links if "pick_cube" in href]
    assert pick == ["fail"] * 3 + ["soft"] * 2 + ["hard"] * 5  # failures first
    shot = tmp_path / "shot.png"
    _chromium(tmp_path, "--window-size=1200,1600", f"--screenshot={shot}", (out / "report.html").as_uri())
    assert shot.stat().st_size > 10_000
