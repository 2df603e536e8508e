"""``price_sources`` on the commands that price with the cost model: ``strategy``,
``pipeline``, ``dep``, ``place``, ``cost``, ``bench`` and ``recommend``.

Oracles: each command's own headline figure (the split's seconds add up to it: the #1
strategy's prefill step plus ``osl`` decode steps, read back from its TTFT and ITL; the chosen
partition's ``period_s``; the FinDEP ``iteration_s``; Sem-MoE's ``moe_layer_time_s``; the one
kernel's ``predicted_ms``; a one-copy burst's ``duration``: the engine is busy from the first
send to the last completion), the shares (they sum to 1), the cost model with no kernel tables
(``--engine none``: every second is roofline) and the one kernel's source (its share is 1)."""

from __future__ import annotations

import json

import pytest

from moeplan.cli import main
from moeplan.specs.presets import model_config
from moeplan.traces.format import save_trace
from moeplan.traces.synthetic import SynthConfig, synthesize

QWEN, LITE = "qwen3-30b-a3b", "deepseek-v2-lite"
OSL = 64
STRATEGY = ["strategy", "--model", QWEN, "--cluster", "h100-sxm-8", "--top", "3", "--osl",
            str(OSL)]  # fmt: skip
PIPELINE = ["pipeline", "--model", QWEN, "--cluster", "smidt-a40", "--pp", "2"]
DEP = ["dep", "--model", LITE, "--cluster", "findep-c", "--ag", "1", "--eg", "1", "--isl",
       "128", "--layers", "2"]  # fmt: skip
COST = ["cost", "moe", "--num-tokens", "100", "--hidden-size", "4096", "--inter-size", "14336",
        "--topk", "2", "--num-experts", "8", "--gpu", "h200-sxm"]  # fmt: skip


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """DeepSeek-V2-Lite cut to 3 layers (2 MoE) as a config.json, and a short trace for it."""
    folder = tmp_path_factory.mktemp("sources")
    config = {**model_config(LITE), "num_hidden_layers": 3}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    cfg = SynthConfig(num_requests=16, num_layers=2, min_len=16, max_len=64, seed=0)
    save_trace(synthesize(cfg), folder / "t.parquet")
    return folder


def _place(trace) -> list[str]:
    return ["place", "--trace", str(trace / "t.parquet"), "--model", str(trace / "config.json"),
            "--ep", "8", "--no-baselines"]  # fmt: skip


def _strategy_busy(d: dict) -> float:
    """One prefill step and ``osl`` decode steps of the #1 strategy (no --rate: TTFT is the
    prefill step, ITL the decode step)."""
    top = d["strategies"][0]
    return top["ttft_s"] + OSL * top["itl_s"]


#: per command: its arguments (given the trace folder) and the figure its split adds up to
COMMANDS = {
    "strategy": (lambda _: STRATEGY, _strategy_busy),
    "pipeline": (lambda _: PIPELINE, lambda d: d["period_s"]),
    "dep": (lambda _: DEP, lambda d: d["iteration_s"]),
    "place": (_place, lambda d: d["methods"]["semmoe"]["moe_layer_time_s"]),
    "cost": (lambda _: COST, lambda d: d["rows"][0]["predicted_ms"] / 1e3),
}


def _json(capsys, args: list[str]) -> dict:
    main([*args, "--json"])
    return json.loads(capsys.readouterr().out)


def _check(ps: dict, figure: float) -> None:
    assert set(ps) == {"measured", "interpolated", "transferred", "roofline"}
    assert abs(sum(r["share"] for r in ps.values()) - 1.0) < 1e-9
    assert sum(r["seconds"] for r in ps.values()) == pytest.approx(figure, rel=1e-9)
    for r in ps.values():
        assert r["seconds"] >= 0.0 and 0.0 <= r["share"] <= 1.0


@pytest.mark.parametrize("cmd", sorted(COMMANDS))
def test_the_split_adds_up_to_the_headline(cmd, capsys, trace):
    args, figure = COMMANDS[cmd]
    d = _json(capsys, args(trace))
    _check(d["price_sources"], figure(d))
    if cmd != "cost":  # an engine's tables price part of every command's headline
        assert d["price_sources"]["roofline"]["share"] < 1.0


@pytest.mark.parametrize("cmd", ["strategy", "pipeline", "dep", "place"])
def test_without_kernel_tables_every_second_is_roofline(cmd, capsys, trace):
    args, figure = COMMANDS[cmd]
    d = _json(capsys, [*args(trace), "--engine", "none"])
    _check(d["price_sources"], figure(d))
    assert abs(d["price_sources"]["roofline"]["share"] - 1.0) < 1e-9


def test_one_kernel_is_its_one_source(capsys):
    d = _json(capsys, COST)
    src = d["rows"][0]["source"]
    assert d["price_sources"][src]["share"] == 1.0
    assert d["price_sources"][src]["heldout_error"] == d["rows"][0]["error_median"]


def test_the_text_output_says_the_shares(capsys, trace):
    for args, what in ((DEP, "the FinDEP iteration"), (COST, "the predicted kernel time")):
        main(args)
        out = " ".join(capsys.readouterr().out.split())
        assert f"shares of the priced seconds of {what}" in out


def test_a_strategy_on_fewer_nodes_is_priced_on_its_nodes(capsys):
    """``--all-sizes`` may rank a deployment on fewer nodes first: its split is priced on
    those nodes (the seconds add up to its own busy time)."""
    args = ["strategy", "--model", QWEN, "--cluster", "h100-sxm-8", "--nodes", "4",
            "--all-sizes", "--rank-by", "itl", "--top", "1", "--osl", str(OSL)]  # fmt: skip
    d = _json(capsys, args)
    assert d["strategies"][0]["num_gpus"] < 32  # the case this checks: fewer nodes win
    _check(d["price_sources"], _strategy_busy(d))


BENCH = ["bench", "--model", LITE, "--cluster", "h100-sxm-8", "--num-prompts", "40",
         "--random-input-len", "512", "--random-output-len", "32"]  # fmt: skip


def test_a_bursts_split_adds_up_to_its_duration(capsys):
    """``--request-rate inf`` on one copy: every prompt is sent at t = 0 and the engine runs
    iteration after iteration until the last completion, so the priced seconds are the
    benchmark's duration."""
    d = _json(capsys, BENCH)
    ps = d["moeplan"]["price_sources"]
    _check(ps, d["duration"])
    assert ps["roofline"]["share"] < 1.0  # the engine's tables price part of it
    d = _json(capsys, [*BENCH, "--cost-engine", "none"])
    _check(d["moeplan"]["price_sources"], d["duration"])
    assert abs(d["moeplan"]["price_sources"]["roofline"]["share"] - 1.0) < 1e-9


def test_a_pd_benchs_split_covers_both_pools(capsys):
    d = _json(capsys, [*BENCH, "--pd", "1*attn-tp1:1*attn-tp1"])
    ps = d["moeplan"]["price_sources"]
    # both pools' engine iterations: at least the decode pool's busy time, the whole run
    # at most twice over (two instances)
    total = sum(r["seconds"] for r in ps.values())
    _check(ps, total)
    assert 0.0 < total <= 2.0 * d["duration"] * (1 + 1e-9)


def test_recommends_answer_says_its_shares(capsys):
    args = ["recommend", "--model", LITE, "--cluster", "h100-sxm-8", "--rate", "5", "--ttft-slo",
            "2000", "--tpot-slo", "50", "--isl", "512", "--osl", "64", "--requests", "100"]  # fmt: skip
    d = _json(capsys, args)
    ps = d["price_sources"]
    _check(ps, sum(r["seconds"] for r in ps.values()))
    assert sum(r["seconds"] for r in ps.values()) > 0.0
    main(args)
    out = " ".join(capsys.readouterr().out.split())
    assert "shares of the priced seconds of the check run's engine iterations" in out
    main(BENCH)
    out = " ".join(capsys.readouterr().out.split())
    assert "shares of the priced seconds of the run's engine iterations" in out
