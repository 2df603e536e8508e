"""Human output fits an 80-column terminal: tables wrap their cells (a long word folds onto
the next line), nothing is cut with an ellipsis, no line is wider than the terminal; one
time unit per table column."""

from __future__ import annotations

import re

import pytest

from moeplan.cli import _common, main
from moeplan.cli._common import fmt_times, plural
from moeplan.search.capacity.slo import limit_words

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


@pytest.mark.parametrize(
    "args",
    [
        ("models",),
        ("clusters",),
        ("inspect", "deepseek-v3", "--cluster", "h100-sxm-8"),
        (
            "pipeline",
            "--model",
            "qwen2-57b-a14b",
            "--cluster",
            "a100-sxm-8",
            "--routing-profile",
            "qwen2-57b-a14b-adak",
            "--pp",
            "4",
            "--quiet",
        ),
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
        ),
        (
            "cost",
            "moe",
            "--cluster",
            "h100-sxm-8",
            "--engine",
            "sglang",
            "--num-tokens",
            "4096",
            "--hidden-size",
            "7168",
            "--inter-size",
            "2048",
            "--topk",
            "8",
            "--num-experts",
            "256",
            "--moe-ep-size",
            "8",
        ),
    ],
)
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
    out = _human(
        capsys,
        monkeypatch,
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
    )
    rows = [line for line in out.splitlines() if re.search(r"(TTFT|TPOT|ITL|E2E) \(", line)]
    assert len(rows) == 4
    for row in rows:  # the unit is in the row's name, the cells are bare numbers
        cells = [c.strip() for c in re.split(r"[│┃]", row) if c.strip()]
        assert all(re.fullmatch(r"[\d,]+\.\d+|—", c) for c in cells[1:]), row


def test_plural():
    assert plural(1, "instance") == "1 instance" and plural(2, "instance") == "2 instances"
    assert plural(0, "copy", "copies") == "0 copies"


LONG_COMMANDS = [
    ("plan",),
    ("serve-sim",),
    ("place",),
    ("pipeline",),
    ("dep",),
    ("strategy",),
    ("calibrate",),
    ("run",),
    ("trace", "synth"),
]


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


def _served(family, layout, gpus, ttft, tpot, per_gpu, rate, bound, meets=True):
    from types import SimpleNamespace as NS

    return NS(
        entry=NS(family=family, layout_label=layout, gpus=gpus),
        metrics=NS(at_percentile=lambda p: (ttft, tpot), output_tokens_per_s_per_gpu=per_gpu),
        result=NS(max_rate_meeting_slo_rps=rate, bound=bound, meets_slo=meets, reason=""),
    )


def test_plan_tables_fit_80_columns_with_long_layouts(capsys, monkeypatch):
    """The two tables of ``moeplan plan`` (rows as a Mixtral / a100-sxm-8 plan prints them):
    within 80 columns, figures whole, one time unit per column."""
    from types import SimpleNamespace as NS

    from moeplan.cli.plan import _analytic_table, _serving_table

    monkeypatch.setattr(_common.console, "width", WIDTH)
    pd = "PD 2x(attn TP2xDP1 / MoE TP2xEP1) : 1x(attn TP2xDP1 / MoE TP2xEP1), 2:1"
    ranking = NS(
        slo=NS(percentile=90.0),
        workload=NS(num_requests=1000),
        objective="throughput-per-gpu",
        ranked=[
            _served(
                "pd",
                pd,
                6,
                1.709,
                0.062453,
                570.5,
                13.37,
                limit_words("TTFT", "prefill pool compute (2 instances at the TTFT SLO)"),
            ),
            _served(
                "strategy",
                "attn TP4xDP1 / MoE TP4xEP1 x2 replicas",
                8,
                0.238942,
                0.09957,
                483.3,
                15.10,
                limit_words("TPOT"),
            ),
            _served(
                "afd",
                "PD 2x(attn TP2xDP1 / MoE TP2xEP1) : 1x(AFD AG1+EG3), 2:1",
                8,
                1.686,
                0.084245,
                427.7,
                13.36,
                limit_words("queue growth (rho >= 1)", "decode pool: batch 259 (KV capacity)"),
                meets=False,
            ),
        ],
    )
    _serving_table(ranking)
    cands = [
        NS(
            family="pipeline",
            name="SMIDT",
            label="DP4 x attn TP1+DP2 | moe TP2+EP1 (4 replicas)",
            gpus=8,
            per_gpu=7300.0,
            ttft_s=1.122,
            itl_s=None,
            mem_bytes_per_gpu=50.84 * 2**30,
            bound="compute",
        ),
        NS(
            family="dep",
            name="FinDEP",
            label="AG 4 + EG 4, ma=1 r1=8 r2=6 ASAS",
            gpus=8,
            per_gpu=1478.0,
            ttft_s=5.542,
            itl_s=0.012433,
            mem_bytes_per_gpu=25.5 * 2**30,
            bound="compute (EG busiest)",
        ),
    ]
    _analytic_table(NS(candidates=cands))
    out = capsys.readouterr().out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= WIDTH
    assert "…" not in out
    for figure in ("1.709", "0.239", "62.45", "99.57", "570.5", "13.37", "7,300", "50.84", "12.43"):
        assert figure in out, figure  # whole, in the column's one unit (s, ms, ms)
    assert "1,709" not in out and "238.94" not in out  # TTFT column in seconds, not mixed
    assert "(misses" in out and "P/D = prefill/decode" in out and "ma = " in out


def test_glossary_explains_the_papers_terms_in_plain_words():
    from moeplan.commands.glossary import TERMS, glossary

    line = glossary("ma", "r1", "r2", "ASAS", "LAR")
    assert line.startswith("terms: ma = ") and "; LAR = local activation rate" in line
    assert {"ag", "eg", "ma", "r1", "r2", "me", "ASAS", "AASS", "LAR", "DPMoE"} <= set(TERMS)
    with pytest.raises(KeyError):
        glossary("not-a-term")
