"""Human output written to a pipe fits 80 columns (tables and prose; a shell command to copy
stays on one line), and ``--help`` prints every help text whole, without the docstrings'
reStructuredText marks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from moeplan.commands.recommend import COMMAND_INDENT

WIDTH = 80
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _piped(*args: str, timeout: float = 300) -> str:
    """stdout of ``moeplan ARGS`` written to a pipe, ``COLUMNS`` unset."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "moeplan", *args], capture_output=True,
                       text=True, timeout=timeout, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def _widest(out: str) -> str:
    lines = [x.rstrip() for x in out.splitlines() if not x.startswith(COMMAND_INDENT + "moeplan ")]
    return max(lines, key=len)


def test_help_is_whole_and_plain_at_80_columns():
    out = _piped("serve-sim", "--help")
    flat = " ".join(out.split())
    # the longest metavar of an option's help, cut by rich's option table at 80 columns
    assert "lognormal:MEDIAN:SIGMA[:MAX]" in flat, out
    assert "``" not in out and "…" not in out
    assert len(_widest(out)) <= WIDTH, _widest(out)
    plan = " ".join(_piped("plan", "--help").split())
    assert "--routing-trace" in plan and "``" not in plan
    top = " ".join(_piped("--help").split())  # each command's first sentence, whole
    assert "with the search's proof that one size fewer cannot." in top
    assert "..." not in top.split("[ARGS]...", 1)[1]  # Click's cut of a long first line


@pytest.mark.parametrize(
    "args",
    [
        (
            "serve-sim",
            "--model",
            "qwen3-30b-a3b",
            "--cluster",
            "h100-sxm-8",
            "--attn-tp",
            "2",
            "--moe-ep",
            "2",
            "--concurrency",
            "4",
            "--requests",
            "100",
            "--isl",
            "1024",
            "--osl",
            "64",
            "--quiet",
        ),  # fmt: skip
        (
            "recommend",
            "--model",
            "deepseek-v2-lite",
            "--cluster",
            "h100-sxm-8",
            "--rate",
            "2",
            "--requests",
            "50",
            "--isl",
            "512",
            "--osl",
            "32",
        ),  # fmt: skip
    ],
    ids=["serve-sim", "recommend"],
)
def test_piped_output_fits_80_columns(args):
    out = _piped(*args)
    assert len(_widest(out)) <= WIDTH, _widest(out)
    assert "…" not in out


def test_piped_plan_fits_80_columns(tmp_path):
    out = _piped("plan", "--model", "deepseek-v2-lite", "--cluster", "h100-sxm-8", "--requests",
                 "50", "--families", "strategy,dep", "--out", str(tmp_path / "o"))  # fmt: skip
    assert len(_widest(out)) <= WIDTH, _widest(out)
    assert "…" not in out


def test_family_legend_gives_each_family_one_meaning_and_the_afd_terms():
    from moeplan.commands.glossary import family_legend
    from moeplan.planners.rank import FAMILY_NAMES

    line = family_legend(["pd", "afd", "pd", "strategy"])
    assert line.startswith(f"families: P/D = {FAMILY_NAMES['pd']}; AFD = {FAMILY_NAMES['afd']}")
    assert line.count("P/D =") == 1 and "terms: ag = GPUs running attention" in line
    assert "terms:" not in family_legend(["strategy", "pd"])
