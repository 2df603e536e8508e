"""The report formats plan_job's outcome: compact figure data, a small page, CDF quantiles,
the quantized-kernel note against NVIDIA's measured rows, the cluster fill, and what limits
the winner. Oracles: brute-force ECDFs, the measured parquet rows read with pyarrow, plain
arithmetic on the figures handed in."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import plotly.graph_objects as go
import pytest

from moeplan.cost import cost_model_for
from moeplan.cost.provenance import quant_vs_bf16, source_errors
from moeplan.kernel_tables import engine_cost_model, table_files
from moeplan.report.html import DIGITS, PLOTLY_FILE, Section, compact, figure_html, render
from moeplan.report.serving import cdf_points
from moeplan.search.capacity.slo import limit_words
from moeplan.search.job.outcome import quant_sentence
from moeplan.search.job.parts import cluster_fill, limits_sentence
from moeplan.serve.metrics import SLO
from moeplan.specs import load_cluster, load_model


def test_cdf_points_are_the_empirical_cdf():
    """Brute force: each drawn (value, fraction) is the ECDF at that value; the maximum is
    drawn at fraction 1; a small sample is drawn whole."""
    rng = np.random.default_rng(0)
    v = rng.lognormal(0, 1, 5000)
    x, y = cdf_points(v, n=200)
    assert len(x) == 200 and y[-1] == 1.0 and x[-1] == v.max()
    for xi, yi in zip(x, y, strict=True):
        assert yi == pytest.approx(np.mean(v <= xi))
    small = [3.0, 1.0, 2.0]
    xs, ys = cdf_points(small)
    assert list(xs) == [1.0, 2.0, 3.0] and list(ys) == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_compact_keeps_four_digits_and_expands_typed_arrays():
    arr = np.array([1234.5678, 0.000123456, 3.0, -98765.4321])
    fig = go.Figure(go.Scatter(x=arr, y=arr * 2, text=["a", "b", "c", "d"]))
    d = compact(json.loads(fig.to_json()))
    xs = d["data"][0]["x"]
    assert isinstance(xs, list) and "bdata" not in json.dumps(d)
    assert np.allclose(xs, arr, rtol=0.5 * 10 ** (1 - DIGITS))  # DIGITS significant digits
    assert xs[2] == 3 and d["data"][0]["text"] == ["a", "b", "c", "d"]
    html, template = figure_html(fig, "fig-0-0")
    assert template and 'Plotly.newPlot("fig-0-0"' in html and "bdata" not in html


def test_page_loads_plotly_once_from_beside_it():
    """plotly.js is referenced once, relatively (works offline, no network address), and the
    page is small even with many points; without plotly the figures say what is missing."""
    figs = [
        go.Figure(go.Scatter(x=np.arange(20_000.0), y=np.sqrt(np.arange(20_000.0))))
        for _ in range(3)
    ]
    page = render("t", "s", [Section(title="a", figures=figs)])
    assert page.count(f'<script src="{PLOTLY_FILE}">') == 1
    assert not re.search(r"(src|href)=\"https?:", page)
    assert page.count("Plotly.newPlot(") == 3 and "keep the two files together" in page
    assert len(page.encode()) < 1_000_000


def test_quantized_experts_priced_slower_than_bf16_name_the_measured_row():
    """GPT-OSS's mxfp4 experts on H100 under SGLang: the quantized time is NVIDIA's measured
    balanced row (read here with pyarrow), slower than the bf16 price of the same shape."""
    import pyarrow.parquet as pq

    m, c = load_model("gpt-oss-120b"), load_cluster("h100-sxm-8")
    q = quant_vs_bf16(engine_cost_model(c, None, "sglang"), m)
    assert q is not None and q["dtype"] == "w4a16_mxfp4" and q["ratio"] > 1
    assert "moe_perf" in q["table"] and "h100_sxm" in q["table"] and q["quant_source"] == "measured"
    path = table_files()[("h100_sxm", "sglang", "moe")][0]  # the release that priced it
    t = pq.read_table(path).to_pandas()
    row = t[(t.moe_dtype == "w4a16_mxfp4") & (t.num_tokens == q["tokens"])
            & (t.hidden_size == m.hidden_size) & (t.num_experts == m.num_experts)
            & (t.topk == m.top_k) & (t.moe_ep_size == 1) & (t.moe_tp_size == 1)
            & (t.distribution == "balanced")]  # fmt: skip
    assert len(row) == 1 and q["quant_s"] == pytest.approx(row.latency.iloc[0] * 1e-3, rel=1e-9)
    assert q["bf16_s"] == pytest.approx(q["quant_s"] / q["ratio"])
    text = quant_sentence(q)
    assert "w4a16_mxfp4" in text and "slower than bf16" in text and "moe_perf" in text
    assert quant_vs_bf16(engine_cost_model(c, None, "sglang"), load_model("qwen3-30b-a3b")) is None
    assert quant_vs_bf16(cost_model_for(c, None), m) is None  # no engine tables: no claim


def test_source_errors_range_over_the_operations_priced():
    p = {"sources": {"transferred": {"lookups": 30, "share": 0.75},
                     "measured": {"lookups": 10, "share": 0.25}},
         "ops": {"moe": {"transferred": {"calls": 20, "error_median": 0.08, "error_p90": 0.2},
                         "measured": {"calls": 10, "error_median": 0.0, "error_p90": 0.0}},
                 "gemm": {"transferred": {"calls": 10, "error_median": 0.03,
                                          "error_p90": None}}}}  # fmt: skip
    rows = {r["source"]: r for r in source_errors(p)}
    assert rows["transferred"]["ops"] == ["gemm", "moe"]
    assert rows["transferred"]["error_median"] == (0.03, 0.08)
    assert rows["transferred"]["error_p90"] == (0.2, 0.2)
    assert rows["measured"]["error_median"] == (0.0, 0.0) and rows["measured"]["share"] == 0.25


def _ranking(gpus: int, tok_s: float, ttft: float, tpot: float, limited: str = "TTFT"):
    metrics = SimpleNamespace(output_tokens_per_s=tok_s,
                              at_percentile=lambda p: (ttft, tpot))  # fmt: skip
    layout = SimpleNamespace(label="L")
    winner = SimpleNamespace(metrics=metrics, result=SimpleNamespace(bound=limit_words(limited)),
                             entry=SimpleNamespace(gpus=gpus, layout=layout))  # fmt: skip
    return SimpleNamespace(
        winner=winner,
        slo=SLO(ttft_s=2.0, tpot_s=0.1, percentile=90.0),
        search={"winner_capacity": {"layout": "L", "limited_by": limited}},
    )


def test_cluster_fill_counts_whole_copies():
    f = cluster_fill(_ranking(12, 1000.0, 1.0, 0.05), 32)
    assert (f.copies, f.idle_gpus, f.total_output_tokens_per_s) == (2, 8, 2000.0)
    assert cluster_fill(_ranking(32, 1000.0, 1.0, 0.05), 32) is None


def test_limits_name_the_slo_it_uses_most_and_the_step():
    r = _ranking(8, 1.0, 1.94, 0.04)
    text = limits_sentence(r, "memory bandwidth (experts)")
    assert "the TTFT SLO. SLO use at p90: TTFT 97%, TPOT 40%" in text
    assert "memory bandwidth (experts)" in text
    queue = limits_sentence(_ranking(8, 1.0, 0.5, 0.04, "queue growth (rho >= 1)"), None)
    assert "queue growth (rho >= 1). SLO use at p90: TTFT 25%, TPOT 40%" in queue
    pooled = limit_words("TPOT", "decode pool: batch 64 (KV capacity)")
    assert pooled == "the TPOT SLO; the rate is set by its decode pool: batch 64 (KV capacity)"


def test_log_axes_label_every_tick_in_full():
    """Ticks at 1-2-5 steps covering the data, labelled "2,000" (never the digit "2" for
    2,000 ms); an SLO line's annotation sits at log10 of its value, as plotly.js expects."""
    from moeplan.report.figures import log_ticks
    from moeplan.report.serving import latency_distributions

    ax = log_ticks([350.0, 1900.0, 2000.0])
    assert ax["type"] == "log" and "2,000" in ax["ticktext"] and "500" in ax["ticktext"]
    assert all(t == f"{v:,g}" for t, v in zip(ax["ticktext"], ax["tickvals"], strict=True))
    assert min(ax["tickvals"]) >= 350 / 1.5 and max(ax["tickvals"]) <= 2000 * 1.5
    curves = {"latency": {"a": {"ttft_s": [0.3, 1.2, 1.9], "tpot_s": [0.03, 0.05, 0.06]}}}
    fig = latency_distributions(curves, SLO(ttft_s=2.0, tpot_s=0.1, percentile=90.0))
    notes = {a.text: a for a in fig.layout.annotations if "SLO" in (a.text or "")}
    assert notes["TTFT SLO 2,000 ms"].x == pytest.approx(np.log10(2000))
    assert (
        notes["TPOT SLO 100 ms"].x == pytest.approx(2.0) and notes["TPOT SLO 100 ms"].xref == "x2"
    )


def test_placement_changes_the_answer_only_from_a_trace_it_beats_contiguous_on():
    from moeplan.search.job.parts import PLACEMENT_GAIN, placement_changes

    def placement(sem: float, base: float = 1.0, fallback: bool = False):
        methods = {
            "semmoe": SimpleNamespace(metrics={"moe_layer_time_s": sem}),
            "contiguous": SimpleNamespace(metrics={"moe_layer_time_s": base}),
        }
        return SimpleNamespace(methods=methods, fallback=fallback)

    assert placement_changes(placement(0.9), "t.npz")
    assert not placement_changes(placement(0.9), None)  # synthetic trace: nothing exported
    assert not placement_changes(placement(0.9, fallback=True), "t.npz")
    assert not placement_changes(placement(1 - PLACEMENT_GAIN / 2), "t.npz")  # within noise
    assert not placement_changes(None, "t.npz")


def test_the_trust_section_states_a_winner_run_outside_cuda_graphs():
    """The report's "How far to trust the prices" carries the flag line of a winner whose run
    spends over a tenth of its engine time above the capture size, and nothing otherwise."""
    from moeplan.report.trust import error_section

    def section(graphs):
        o = SimpleNamespace(pricing={"engine": None, "note": "no engine tables"},
                            price_sources={}, lookup_sources=(), quant=None,
                            cuda_graphs=graphs)  # fmt: skip
        return " ".join(error_section(o).paragraphs)

    flagged = {"capture_max_batch_per_rank": 512, "engine_time_above_share": 0.73,
               "flagged": True}  # fmt: skip
    assert "The winner's run: outside CUDA graphs: 73% of the engine's time" in section(flagged)
    assert "outside CUDA graphs" not in section({**flagged, "engine_time_above_share": 0.05,
                                                 "flagged": False})  # fmt: skip
    assert "outside CUDA graphs" not in section(None)
