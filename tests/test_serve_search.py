"""Serving searches: rate bisection vs a scan, engine defaults, evaluate_layouts and ranking."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from doc_figures import pinned
from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.search import evaluate_layouts, max_rate_meeting_slo, rank_results
from moeplan.search.colocated.evaluate import analytic_rate
from moeplan.serve import (
    SLO,
    EngineConfig,
    LengthDist,
    ServeWorkload,
    engine_config,
    generate,
    simulate,
    summarize,
)
from moeplan.serve.metrics import INTERFACE_METRICS
from moeplan.specs import load_cluster, load_model

MODEL = load_model("qwen3-30b-a3b")
H100 = load_cluster("h100-sxm-8")
INTERFACE_KEYS = {  # the serving search's interface
    "ttft_p50_s",
    "ttft_p90_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "e2e_p90_s",
    "output_tokens_per_s",
    "output_tokens_per_s_per_gpu",
    "goodput_rps",
    "max_rate_meeting_slo_rps",
    "kv_utilisation",
    "preemptions",
}


@dataclass
class _Threshold:
    ok: bool

    def meets(self, slo: SLO) -> bool:
        return self.ok


@pytest.mark.parametrize("limit", [0.013, 0.7, 3.0, 41.0, 900.0])
def test_bisection_finds_the_threshold(limit):
    calls = []

    def run(rate: float) -> _Threshold:
        calls.append(rate)
        return _Threshold(rate <= limit)

    got = max_rate_meeting_slo(run, SLO(ttft_s=1.0), hi=5.0, rel_tol=0.01)
    assert limit / 1.0101 <= got <= limit
    assert len(calls) < 40


#: simulated rates the bisection is checked against; the analytic estimate's tolerance
SCAN_POINTS, ANALYTIC_TOL = 96, 0.03


def test_bisection_matches_a_scan_of_simulated_rates():
    """M/D/1-like engine (cap 1, fixed service): bisection = largest passing rate of a scan."""
    slo = SLO(ttft_s=0.3)
    base = ServeWorkload(
        num_requests=300, rate=1.0, isl=LengthDist(mean=50), osl=LengthDist(mean=5), seed=5
    )
    cfg = EngineConfig(policy="prefill-first", chunk_tokens=512, max_running=1, kv_tokens=10_000)

    def run(rate: float):
        return summarize(simulate(generate(base.with_rate(rate)), cfg, lambda b: 0.02), 1, slo)

    scan = [r for r in np.linspace(0.5, 10.0, SCAN_POINTS) if run(r).meets(slo)]
    got = max_rate_meeting_slo(run, slo, hi=4.0, rel_tol=0.01)
    assert max(scan) * 0.985 <= got <= max(scan) + 0.1


def test_engine_defaults_follow_the_engines():
    a100 = load_cluster("a100-sxm-8")
    lay = Layout(attn_tp=2, moe_ep=2)
    sg = engine_config("sglang", MODEL, H100, lay)
    vl = engine_config("vllm", MODEL, H100, lay)
    vl_a100 = engine_config("vllm", MODEL, a100, lay)
    assert (sg.policy, sg.chunk_tokens, sg.admit_reserve) == ("prefill-first", 8192, 0.7)
    assert sg.max_running == min(sg.kv_tokens_per_rank // 2, 4096)
    assert (vl.policy, vl.chunk_tokens, vl.max_running) == ("mixed", 8192, 1024)
    assert (vl_a100.chunk_tokens, vl_a100.max_running) == (2048, 256)
    with pytest.raises(MoeplanError, match="engine"):
        engine_config("trt", MODEL, H100, lay)


def test_analytic_rate_matches_closed_loop_simulation():
    """Closed loop at B in flight, constant iteration time: rate = B / (osl d + B p)."""
    d, isl, osl, b = 0.01, 1000, 50, 8
    cfg = EngineConfig(
        policy="prefill-first", chunk_tokens=1000, max_running=b, kv_tokens=b * (isl + osl)
    )
    est = analytic_rate(lambda batch: d, cfg, isl, osl, SLO())
    w = ServeWorkload(
        num_requests=800,
        rate=None,
        concurrency=b,
        isl=LengthDist(mean=isl),
        osl=LengthDist(mean=osl),
    )
    res = simulate(generate(w), cfg, lambda batch: d)
    sim_rate = len(res.osl) / float(res.finish_s.max())
    assert est.batch == b
    assert est.rate_rps == pytest.approx(sim_rate, rel=ANALYTIC_TOL)


def _fake_factory(layout: Layout):
    scale = 1.0 / layout.gpus

    def ev(batch) -> float:
        return 2e-3 + scale * (2e-5 * batch.tokens + 1e-9 * batch.decode * batch.decode_ctx)

    return ev


def test_evaluate_layouts_returns_interface_metrics_in_order():
    lays = [
        Layout(attn_tp=2, moe_ep=2),
        Layout(attn_dp=4, moe_ep=4),
        Layout(attn_tp=3, moe_tp=3),
        Layout(attn_tp=4, moe_ep=4, pp=2),
    ]
    w = ServeWorkload(
        num_requests=200, rate=4.0, isl=LengthDist(mean=512), osl=LengthDist(mean=64), seed=1
    )
    slo = SLO(ttft_s=1.0, tpot_s=0.05)
    res = evaluate_layouts(
        MODEL,
        H100,
        cost_model_for(H100),
        lays,
        w,
        slo,
        evaluator_factory=_fake_factory,
        search_requests=150,
    )
    assert [r.layout for r in res] == lays
    assert not res[2].feasible and "num_attention_heads" in res[2].reason
    for r in (res[0], res[1], res[3]):
        d = r.to_dict()
        assert r.feasible and set(d["metrics"]) >= INTERFACE_KEYS
        assert d["metrics"]["max_rate_meeting_slo_rps"] > 0
        assert d["gpus"] == r.layout.gpus
    ranked = rank_results(res)
    assert ranked[-1] is res[2]
    per_gpu = [r.metrics.output_tokens_per_s_per_gpu for r in ranked[:3] if r.meets_slo]
    assert per_gpu == sorted(per_gpu, reverse=True)


def test_evaluate_layouts_with_the_cost_model():
    """The real iteration model end to end on two layouts (no fakes)."""
    lays = [Layout(attn_tp=2, moe_ep=2), Layout(attn_dp=2, moe_ep=2)]
    w = ServeWorkload(
        num_requests=150, rate=2.0, isl=LengthDist(mean=1024), osl=LengthDist(mean=128), seed=2
    )
    res = evaluate_layouts(
        MODEL,
        H100,
        cost_model_for(H100),
        lays,
        w,
        SLO(ttft_s=2.0, tpot_s=0.05),
        search_requests=120,
    )
    for r in res:
        assert r.feasible and r.metrics is not None and r.bound
        assert r.metrics.output_tokens_per_s == pytest.approx(
            w.osl.mean * w.num_requests / r.metrics.duration_s
        )


def test_interface_constant_is_the_issues_list():
    assert set(INTERFACE_METRICS) == INTERFACE_KEYS


def test_rank_rejects_unknown_objective():
    with pytest.raises(MoeplanError, match="objective"):
        rank_results([], "fastest")


def test_bound_names_kv_roofline_side_and_link_level():
    """Roofline ridge: 2 m / w against peak FLOP/s / bandwidth; comm level by stage span."""
    from dataclasses import replace as dc_replace

    from moeplan.search.colocated.evaluate import limiting_part

    w = ServeWorkload(num_requests=50, rate=5.0, isl=LengthDist(mean=100), osl=LengthDist(mean=10))
    cfg = EngineConfig(policy="prefill-first", chunk_tokens=512, max_running=8, kv_tokens=4000)
    m = summarize(simulate(generate(w), cfg, lambda b: 1e-3), 1, SLO())
    lay = Layout(attn_dp=8, moe_ep=8)
    ridge = H100.gpu.flops_bf16 / H100.gpu.mem_bw
    small = int(ridge * MODEL.expert_weight_bytes / 2 * MODEL.num_experts / MODEL.top_k) - 8
    experts = {"moe": 1.0, "attention": 0.1}
    assert limiting_part(experts, m, MODEL, H100, lay, small) == "memory bandwidth (experts)"
    assert limiting_part(experts, m, MODEL, H100, lay, 4 * small) == "compute (experts)"
    assert limiting_part({"comm": 1.0}, m, MODEL, H100, lay, 8) == "intra-node communication"
    two = load_cluster("h100-sxm-8").with_nodes(2)
    wide = Layout(attn_dp=16, moe_ep=16)
    assert limiting_part({"comm": 1.0}, m, MODEL, two, wide, 8) == "inter-node communication"
    full = dc_replace(m, kv_peak_utilisation=0.99)
    assert limiting_part(experts, full, MODEL, H100, lay, 8) == "KV capacity"


def test_the_docs_figures_are_these_oracles():
    """serve.md's figures (docs/benchmarks/data/serve-oracles.json) of the rate search."""
    figures = pinned("serve-oracles")
    assert (figures["scan_points"], figures["analytic_tolerance"]) == (SCAN_POINTS, ANALYTIC_TOL)
