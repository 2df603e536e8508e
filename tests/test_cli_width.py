"""Human output fits an 80-column terminal: tables wrap their cells (a long word folds onto
the next line), nothing is cut with an ellipsis, no line is wider than the terminal; one
time unit per table column."""

from __future__ import annotations

import re

import pytest

from moeplan.cli import _common, main
from moeplan.cli._common import fmt_times, plural

WIDTH = 80


def _human(capsys, monkeypatch, *args: str) -> str:
    monkeypatch.setattr(_common.console, "width", WIDTH)
    code = 0
    try:
        main(list(args))
    except SystemExit as ex:
        code = int(ex.code or 0)
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


@pytest.mark.parametrize("args", [
    ("models",),
    ("clusters",),
    ("inspect", "deepseek-v3", "--cluster", "h100-sxm-8"),
    ("pipeline", "--model", "qwen2-57b-a14b", "--cluster", "a100-sxm-8", "--routing-profile",
     "qwen2-57b-a14b-adak", "--pp", "4", "--quiet"),
    ("serve-sim", "--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8", "--attn-tp", "2",
     "--moe-ep", "2", "--rate", "3", "--requests", "100", "--isl", "1024", "--osl", "64",
     "--quiet"),
])
def test_tables_fit_80_columns_and_nothing_is_cut(capsys, monkeypatch, args):
    out = _human(capsys, monkeypatch, *args)
    lines = out.splitlines()
    assert lines
    assert max(len(line.rstrip()) for line in lines) <= WIDTH, max(lines, key=len)
    assert "…" not in out  # rich's ellipsis: a cell was truncated


def test_one_time_unit_per_column():
    unit, texts = fmt_times([1.746, 0.352756, None, float("nan")])
    assert unit == "s" and texts == ["1.746", "0.353", "—", "—"]
    unit, texts = fmt_times([0.0624, 0.0996])
    assert unit == "ms" and texts == ["62.40", "99.60"]
    unit, texts = fmt_times([4e-6, 2e-7])
    assert unit == "µs" and texts == ["4.0", "0.2"]


def test_serve_sim_latency_rows_carry_one_unit(capsys, monkeypatch):
    out = _human(capsys, monkeypatch, "serve-sim", "--model", "qwen3-30b-a3b", "--cluster",
                 "h100-sxm-8", "--attn-tp", "2", "--moe-ep", "2", "--rate", "3", "--requests",
                 "100", "--isl", "1024", "--osl", "64", "--quiet")
    rows = [line for line in out.splitlines() if re.search(r"(TTFT|TPOT|ITL|E2E) \(", line)]
    assert len(rows) == 4
    for row in rows:  # the unit is in the row's name, the cells are bare numbers
        cells = [c.strip() for c in re.split(r"[│┃]", row) if c.strip()]
        assert all(re.fullmatch(r"[\d,]+\.\d+|—", c) for c in cells[1:]), row


def test_plural():
    assert plural(1, "instance") == "1 instance" and plural(2, "instance") == "2 instances"
    assert plural(0, "copy", "copies") == "0 copies"


LONG_COMMANDS = [("plan",), ("serve-sim",), ("place",), ("pipeline",), ("dep",), ("strategy",),
                 ("calibrate",), ("run",), ("trace", "synth")]


@pytest.mark.parametrize("path", LONG_COMMANDS)
def test_every_long_command_takes_quiet(path):
    from moeplan.cli import _command

    cmd = _command()
    for name in path:
        cmd = cmd.commands[name]
    flags = {o for p in cmd.params for o in p.opts}
    assert "--quiet" in flags and "--json" in flags, path


def test_progress_is_silent_when_quiet_or_not_a_terminal(capsys):
    from moeplan.cli._common import progress

    for show in (False, True):  # capsys: stderr is not a terminal
        with progress(show, "working") as step:
            step("still working")
    assert capsys.readouterr().err == ""
