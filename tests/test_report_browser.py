"""report.html in headless Chromium: no console errors, every figure rendered, a screenshot.

Skipped (with the reason) when Chromium is absent; ``make test-browser`` installs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHROME = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=15000",
    "--enable-logging=stderr",
    "--v=0",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROME is None,
        reason="chromium not installed; run `make test-browser` (installs Debian's chromium)",
    ),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "moeplan",
            "plan",
            "--model",
            "deepseek-v2",
            "--layers",
            "8",
            "--cluster",
            "findep-a",
            "--out",
            str(out),
            "--quiet",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert p.returncode == 0, p.stderr
    return out / "report.html"


def _chrome(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROME, *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_every_figure_renders_without_console_errors(report, tmp_path):
    p = _chrome(["--dump-dom", report.as_uri()], tmp_path)
    dom = p.stdout
    figures = re.findall(r'id="fig-\d+-\d+"', report.read_text())
    assert figures, "the report has no figures"
    rendered = re.findall(r'class="[^"]*js-plotly-plot[^"]*"', dom)
    assert len(rendered) == len(figures), (len(rendered), len(figures))
    assert dom.count('class="main-svg"') >= len(figures)
    console_errors = [
        ln for ln in p.stderr.splitlines() if "CONSOLE" in ln and ("Error" in ln or "error" in ln)
    ]
    assert not console_errors, console_errors


def test_screenshot_for_the_docs(report, tmp_path):
    """Screenshot of the report; ``make test-browser`` refreshes ``docs/report.png`` with it."""
    docs = Path(__file__).resolve().parent.parent / "docs" / "report.png"
    shot = docs if os.environ.get("MOEPLAN_UPDATE_SCREENSHOT") else tmp_path / "report.png"
    p = _chrome(
        [f"--screenshot={shot}", "--window-size=1280,2400", "--hide-scrollbars", report.as_uri()],
        tmp_path,
    )
    assert shot.exists() and shot.stat().st_size > 20_000, p.stderr[-2000:]
    json.dumps({"screenshot": str(shot)})
