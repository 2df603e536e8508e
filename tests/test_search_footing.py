"""The deployment search on one footing: only deployment kinds the engine launches, the same
instance-knob variants for colocated layouts and disaggregated pools, and a pruning bound
that no steady run above it beats."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from cli_run import run_main
from moeplan.backends import BACKENDS
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.layout import Layout
from moeplan.search.capacity.slo import steady_probe
from moeplan.search.colocated.rank import _knobs_for
from moeplan.search.colocated.search import SpaceCandidate, pick_knobs, prepare
from moeplan.search.colocated.space import copies, layouts
from moeplan.search.disagg.pools import Context, pool_knobs
from moeplan.search.disagg.rank import disagg_setup
from moeplan.search.ranking.rank import KnobSearch
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.serve.iteration.instance_knobs import InstanceKnobs, resolve_knobs
from moeplan.specs import load_cluster, load_model, model_from_dict
from moeplan.specs.presets import model_config

DSV3 = load_model("deepseek-v3")
#: DeepSeek-V3's block-FP8 quantization_config (its config.json): SGLang runs DeepEP's MoE
#: with block-FP8 experts only (moeplan.backends.sglang_caps), so the bound test's small
#: network is Qwen3-30B-A3B with FP8 block weights
FP8_BLOCK = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
             "weight_block_size": [128, 128]}  # fmt: skip


def _qwen3_30b_fp8():
    cfg = dict(model_config("qwen3-30b-a3b"), quantization_config=FP8_BLOCK)
    return model_from_dict(cfg, name="qwen3-30b-a3b-fp8")


OPEN = ServeWorkload(num_requests=10, rate=1.0, isl=LengthDist(mean=1024), osl=LengthDist(mean=64))


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_plan_never_searches_attention_ffn_disaggregation(engine):
    """Neither SGLang 0.5.23 nor vLLM 0.11.0 launches AFD: the search skips the family and
    says which rule, even when its base family (FinDEP's ``dep``) was planned."""
    c = load_cluster("h100-sxm-8", 2)
    result = SimpleNamespace(model=DSV3, cluster=c, candidates=[
        SimpleNamespace(family="strategy"), SimpleNamespace(family="dep")])  # fmt: skip
    cm = engine_cost_model(c, engine=engine)
    _, fams, why = disagg_setup(result, cm, OPEN, SLO(ttft_s=2.0, tpot_s=0.1), engine=engine)
    assert fams == ["pd"]
    assert why["afd"].startswith(
        f"{BACKENDS[engine].label} {BACKENDS[engine].version} launches no afd"
    )


def test_serve_sim_refuses_an_afd_deployment_on_vllm(capsys):
    code, out, err = run_main(capsys, "serve-sim", "--model", "qwen3-30b-a3b", "--cluster",
                              "h100-sxm-8", "--isl", "1024", "--osl", "32", "--requests", "60",
                              "--engine", "vllm", "--pd", "1*attn-tp2.moe-tp2:1*ag2.eg4", "--json")  # fmt: skip
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "vLLM 0.11.0 launches no afd deployment" in err and "attention-FFN" in err


def _variants(engine, model, cluster, lay, search=None):
    cm = engine_cost_model(cluster, engine=engine)
    knobs = _knobs_for(search or KnobSearch(), cm, SimpleNamespace(model=model, cluster=cluster))
    return {(k.a2a, k.tbo) for k in knobs(lay)}


def test_colocated_layouts_try_deepep_and_two_batch_overlap_where_allowed():
    """A DeepSeek-V3 EP16 layout on 2x8 H200 tries the fused MoE, DeepEP and DeepEP with
    two-batch overlap — as its P/D pools do — and serve-sim's default knobs are among them
    (the search bounds what serve-sim runs); MoE TP (no DeepEP), an A100 (no DeepEP) and a
    given ``--a2a nccl`` leave the fused MoE only."""
    h200 = load_cluster("h200-sxm-8", 2)
    ep = Layout(attn_dp=16, moe_ep=16)
    every = {("nccl", False), ("deepep", False), ("deepep", True)}
    assert _variants("sglang", DSV3, h200, ep) == every
    assert _variants("vllm", DSV3, h200, ep) == every
    serve_sim = resolve_knobs("sglang", DSV3, h200, ep)
    assert (serve_sim.a2a, serve_sim.tbo) in every
    ctx = Context(model=DSV3, cluster=h200, cost=engine_cost_model(h200, engine="sglang"),
                  workload=OPEN, slo=SLO(ttft_s=2.0, tpot_s=0.1))  # fmt: skip
    assert {(k.a2a, k.tbo) for k in pool_knobs(ctx, ep)} == every
    assert _variants("sglang", DSV3, h200, Layout(attn_dp=16, moe_tp=16)) == {("nccl", False)}
    a100 = load_cluster("a100-sxm-8", 2)
    assert _variants("sglang", DSV3, a100, ep) == {("nccl", False)}
    given = KnobSearch(given=frozenset({"a2a"}), a2a="nccl")
    assert _variants("sglang", DSV3, h200, ep, given) == {("nccl", False)}
    # the P/D pools keep the user's knobs as the colocated layouts do (plan --a2a / --tbo)
    held = replace(ctx, knob_search=given)
    assert {(k.a2a, k.tbo) for k in pool_knobs(held, ep)} == {("nccl", False)}
    tbo = KnobSearch(base=InstanceKnobs(tbo=True), given=frozenset({"tbo"}))
    assert {(k.a2a, k.tbo) for k in pool_knobs(replace(ctx, knob_search=tbo), ep)} == {
        ("deepep", True)
    }
    nccl_tbo = KnobSearch(base=InstanceKnobs(tbo=True), given=frozenset({"tbo", "a2a"}), a2a="nccl")
    assert pool_knobs(replace(ctx, knob_search=nccl_tbo), ep) == []


#: a steady run at this multiple of a layout's bound must miss the SLOs: the 15 % margin
#: covers the p90's sampling noise over REQUESTS measured requests and the queue-growth
#: test's (a run at the bound itself may pass where a resource saturates); the bound's own
#: grid slack is on the safe side (it only raises the bound)
ABOVE_BOUND = 1.15
#: the bound is tight here: some run at this multiple of it meets the SLOs (the oracle bites)
BELOW_BOUND = 0.8
REQUESTS = 300


def test_no_steady_run_above_the_bound_meets_the_slos():
    """Every (layout, knob variant) of Qwen3-30B-A3B on 2 H100s (SGLang's kernels, DeepEP
    where it runs): a steady run at ``ABOVE_BOUND`` x the pruning bound, with the knobs the
    search would simulate, misses the SLOs or is unstable — the bound is an upper bound of
    what serve-sim finds, knobs included."""
    m = _qwen3_30b_fp8()
    c = replace(load_cluster("h100-sxm-8"), gpus_per_node=2, name="h100-sxm-2")
    cm = engine_cost_model(c, engine="sglang")
    wl = ServeWorkload(num_requests=REQUESTS, rate=1.0, isl=LengthDist(mean=1024),
                       osl=LengthDist(mean=128), seed=1)  # fmt: skip
    slo = SLO(ttft_s=3.0, tpot_s=0.2)  # loose: capacity near saturation, the bound tight
    knobs_of = _knobs_for(KnobSearch(), cm, SimpleNamespace(model=m, cluster=c))
    tried, met_below = set(), 0
    for lay in layouts(m, c):
        k, spare = copies(c, lay)
        for kn in knobs_of(lay):
            s = SpaceCandidate(layout=lay, replicas=k, spare_gpus=spare, knobs=kn)
            prepare(s, m, c, cm, wl, slo, "sglang")
            if s.bound is None or s.bound.rate_rps <= 0:
                continue
            pick_knobs(s, wl, slo)
            rate = ABOVE_BOUND * s.bound.rate_rps
            p = steady_probe(s.cfg, s.evaluate, wl, slo, rate, requests=REQUESTS)
            assert not p.meets(slo), (lay.label, kn, s.bound.rate_rps)
            tried.add((kn.a2a, kn.tbo))
            low = BELOW_BOUND * s.bound.rate_rps
            met_below += steady_probe(s.cfg, s.evaluate, wl, slo, low, requests=REQUESTS).meets(slo)
    assert met_below >= 3
    assert tried == {("nccl", False), ("deepep", False), ("deepep", True)}
