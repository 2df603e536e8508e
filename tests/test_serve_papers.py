"""The papers' serving comparisons (bench/bench_serve_papers.py), small and fast: the LAR
pricing of the all-to-all (Sem-MoE) against its closed form, and the orderings that are robust
on the papers' testbeds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from doc_figures import pinned
from moeplan.cost import CostModel, cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.planners.strategy.space import named_baselines
from moeplan.search import max_rate_meeting_slo
from moeplan.search.colocated.evaluate import run_workload
from moeplan.serve import (
    SLO,
    Batch,
    IterationModel,
    LengthDist,
    ServeWorkload,
    engine_config,
)
from moeplan.serve.iteration.model import (
    a2a_scale,
    busiest_part,
    evaluator_factory,
    iteration_time,
)
from moeplan.specs import load_cluster, load_model

QWEN = load_model("qwen3-30b-a3b")
H100 = load_cluster("h100-sxm-8").with_nodes(2)
ROOF = CostModel(H100)  # datasheet roofline: ring/pairwise formulas for every collective
LAYOUTS = [
    Layout(attn_dp=8, moe_ep=8),  # attention DP + EP, one node
    Layout(attn_tp=4, attn_dp=2, moe_tp=2, moe_ep=4),  # TP-EP hybrid
    Layout(attn_dp=16, moe_ep=16),  # EP over two nodes
    Layout(attn_tp=2, attn_dp=2, moe_ep=4, pp=2),  # pipelined
]
BATCHES = [
    Batch(64, 1500, ()),
    Batch(5, 700, ((512, 2048), (300, 300))),
    Batch(0, 0, ((2048, 2048),)),
]
#: LAR values outside [0, 1] (and NaN) that are refused
REFUSED = (-0.1, 1.5, float("nan"))


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: lay.label)
def test_lar_one_over_ep_is_todays_time_exactly(layout):
    """Uniform routing keeps 1/EP of the activations local: the default pricing."""
    base = IterationModel(QWEN, H100, ROOF, layout)
    same = IterationModel(QWEN, H100, ROOF, layout, lar=1 / layout.moe_ep)
    for b in BATCHES:
        assert same(b) == base(b)
        assert same.breakdown(b) == base.breakdown(b)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: lay.label)
def test_lar_one_removes_exactly_the_all_to_all(layout):
    """Closed form: the default comm minus dispatch + combine of every MoE layer (per stage,
    busiest micro-batch) equals the comm at LAR = 1; nothing else changes."""
    base = IterationModel(QWEN, H100, ROOF, layout)
    local = IterationModel(QWEN, H100, ROOF, layout, lar=1.0)
    nodes = min(layout.moe_ep, -(-layout.stage_gpus // H100.gpus_per_node))
    for b in BATCHES:
        bd0, bd1 = base.breakdown(b), local.breakdown(b)
        mb_tokens = busiest_part(b, bd0["micro_batches"]).tokens
        nbytes = mb_tokens / layout.moe_ep * QWEN.top_k * QWEN.hidden_bytes
        a2a = 2 * ROOF.collective("all_to_all", nbytes, layout.moe_ep, nodes)
        assert bd1["comm"] == pytest.approx(bd0["comm"] - QWEN.num_moe_layers * a2a, rel=1e-9)
        assert bd1["moe"] == bd0["moe"] and bd1["attention"] == bd0["attention"]
        if layout.attn_tp == layout.moe_tp == 1:
            assert bd1["comm"] == 0.0


@settings(max_examples=25)
@given(
    lo=st.floats(0.0, 1.0),
    hi=st.floats(0.0, 1.0),
    decode=st.integers(1, 512),
    ctx=st.integers(1, 8192),
    layout=st.sampled_from(LAYOUTS),
)
def test_more_local_activations_never_slower(lo, hi, decode, ctx, layout):
    lo, hi = min(lo, hi), max(lo, hi)
    b = Batch(decode, ctx, ())
    slow = iteration_time(QWEN, H100, ROOF, layout, b, lar=lo)
    fast = iteration_time(QWEN, H100, ROOF, layout, b, lar=hi)
    assert fast <= slow * (1 + 1e-12)


def test_a2a_scale_closed_form_and_bad_input():
    assert a2a_scale(None, 8) == 1.0
    assert a2a_scale(0.5, 8) == pytest.approx(0.5 / 0.875)
    assert a2a_scale(0.3, 1) == 1.0  # no EP: nothing to scale
    for bad in REFUSED:
        with pytest.raises(MoeplanError, match=r"lar \(.*\) must be a fraction in \[0, 1\]"):
            IterationModel(QWEN, H100, ROOF, LAYOUTS[0], lar=bad)
        with pytest.raises(MoeplanError, match="lar"):
            evaluator_factory(QWEN, H100, ROOF, lar=bad)
    make = evaluator_factory(QWEN, H100, ROOF, imbalance=1.2, lar=0.4)
    ref = IterationModel(QWEN, H100, ROOF, LAYOUTS[0], imbalance=1.2, lar=0.4)
    assert make(LAYOUTS[0])(BATCHES[0]) == ref(BATCHES[0])


# ---- orderings the comparisons rely on (small versions) -----------------------------------
@pytest.mark.xfail(
    strict=True,
    reason="since the grouped experts read only the experts a decode batch hits, vLLM TP+PP's "
    "ITL equals DP+EP's (H20: 29.8 vs 29.3 ms; 910B: 12.8 vs 12.8 ms) and Tutel TP-EP is the "
    "slowest (42.2 / 14.9 ms): the paper's 227 vs 160 ms gap is not reproduced",
)
@pytest.mark.parametrize("cluster", ["mixserve-h20", "mixserve-910b"])
def test_mixserve_vllm_tp_pp_has_the_worst_itl_of_table_ii(cluster):
    """MixServe §IV-B: vLLM TP+PP is the slowest baseline in decode (910B DeepSeek-R1: 227 ms
    vs 160 ms); simulated at the paper's cap of 16 running requests."""
    cl, model = load_cluster(cluster), load_model("deepseek-v3")
    cost = cost_model_for(cl)
    w = ServeWorkload(
        num_requests=48, rate=4.0, seed=0, isl=LengthDist(mean=300), osl=LengthDist(mean=64)
    )
    itl = {}
    for name, s in named_baselines(cl.num_nodes, cl.gpus_per_node).items():
        lay = Layout(
            attn_tp=s.attn_tp, attn_dp=s.attn_dp, moe_tp=s.moe_tp, moe_ep=s.moe_ep, pp=s.pp
        )
        cfg = engine_config("vllm", model, cl, lay, max_running=16)
        itl[name] = run_workload(cfg, w, IterationModel(model, cl, cost, lay), lay.gpus, SLO())[
            1
        ].itl_p50_s
    assert max(itl, key=itl.get) == "vllm-tp-pp"
    assert itl["vllm-tp-pp"] > 1.3 * itl["vllm-dp-ep"]


def test_semmoe_higher_lar_raises_the_rate_meeting_a_ttft_slo():
    """Sem-MoE §4.4 in miniature: same imbalance, LAR 1/8 -> 1 on semmoe-8 (DSv2-Lite, DP8 +
    EP8); the largest Poisson rate meeting one TTFT SLO does not fall, and prefill is faster."""
    cl, model = load_cluster("semmoe-8"), load_model("deepseek-v2-lite")
    cost, lay = cost_model_for(cl), Layout(attn_dp=8, moe_ep=8)
    cfg = engine_config("sglang", model, cl, lay)
    w = ServeWorkload(
        num_requests=200, rate=10.0, seed=0, isl=LengthDist(mean=512), osl=LengthDist(mean=16)
    )
    rates = []
    for lar in (1 / 8, 1.0):
        it = IterationModel(model, cl, cost, lay, imbalance=1.1, lar=lar)

        def run(r, it=it):
            return run_workload(cfg, w.with_rate(r), it, lay.gpus, SLO())[1]

        rates.append(max_rate_meeting_slo(run, SLO(ttft_s=0.15), hi=100.0, rel_tol=0.02))
        rates.append(it(Batch(0, 0, ((4096, 4096),))))
    assert rates[2] >= rates[0] * 0.98  # within the bisection's tolerance
    assert rates[3] < rates[1]


def test_smidt_pp_beats_no_pp_on_32_a40_and_too_deep_pp_declines():
    """SMIDT §5.2 (Fig. 6): on 4 x 8 A40 (PCIe, 100 Gb/s IB) Qwen3-235B prefill-only (MMLU
    400:1, Top-P profile) is faster with PP than with one stage over all 32 GPUs, and the
    throughput falls again when PP goes past the sweet spot (PP16 < PP4)."""
    from moeplan.commands.pipeline import read_routing_profile

    cl, model = load_cluster("smidt-a40"), load_model("qwen3-235b-a22b")
    cost, route = cost_model_for(cl), read_routing_profile("qwen3-235b-a22b-topp", model)
    w = ServeWorkload(
        num_requests=96,
        rate=None,
        concurrency=64,
        seed=0,
        isl=LengthDist(mean=400),
        osl=LengthDist(mean=1),
    )
    tps = {}
    for pp in (1, 4, 16):
        lay = Layout(attn_dp=32 // pp, moe_ep=32 // pp, pp=pp)
        # SMIDT ran its own system, not SGLang: SGLang's scheduler stands in, at a static
        # memory fraction of 0.85 (SGLang's own default for 32 DP-attention ranks on a 48 GB
        # A40 reserves more than the card holds: moeplan.backends.sglang)
        cfg = engine_config("sglang", model, cl, lay, mem_fraction=0.85)
        it = IterationModel(model, cl, cost, lay, route)
        tps[pp] = run_workload(cfg, w, it, lay.gpus, SLO())[1].total_tokens_per_s
    assert tps[4] > 2 * tps[1]
    assert tps[16] < tps[4]


def test_the_docs_figures_are_these_tests():
    """papers.md's figures (docs/benchmarks/data/papers-lar-tests.json): the layouts and
    batches the identity and the closed form are checked on, and the refused values."""
    assert pinned("papers-lar-tests") == {
        "layouts": len(LAYOUTS),
        "batches": len(BATCHES),
        "refused_below": REFUSED[0],
        "refused_above": REFUSED[1],
    }
