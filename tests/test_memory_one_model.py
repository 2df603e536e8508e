"""One memory model: the strategy planner's fit check and the serving simulator's KV pool
answer the same question the same way for the same layout."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from moeplan.cost import cost_model_for
from moeplan.cost import memory as mem
from moeplan.errors import MoeplanError
from moeplan.planners.strategy.cost import StrategyEvaluator
from moeplan.planners.strategy.space import Strategy, enumerate_strategies
from moeplan.serve.knobs import default_chunk
from moeplan.serve.layout import ServeLayout, kv_capacity_tokens
from moeplan.specs import Workload, load_cluster, load_model


def _serve_layout(s: Strategy) -> ServeLayout:
    return ServeLayout(
        attn_tp=s.attn_tp, attn_dp=s.attn_dp, moe_tp=s.moe_tp, moe_ep=s.moe_ep, pp=s.pp
    )


@pytest.mark.parametrize(
    ("model", "cluster", "nodes", "batch", "isl", "osl"),
    [
        ("deepseek-v3", "h800-sxm-8", 16, 8192, 4096, 1786),
        ("qwen3-30b-a3b", "h100-sxm-8", 2, 512, 2048, 1024),
        ("mixtral-8x7b", "a100-sxm-8", 1, 256, 4096, 512),
    ],
)
def test_strategy_fits_iff_the_serving_kv_pool_holds_its_batch(
    model: str, cluster: str, nodes: int, batch: int, isl: int, osl: int
) -> None:
    """For every strategy of the grammar: the strategy planner's memory fits the GPU exactly
    when the serving simulator's KV pool (same layout, the engine's chunk as the step) holds
    the strategy's ``ceil(batch / dp)`` requests of ``isl + osl`` tokens per attention rank;
    the bytes before KV agree to the byte."""
    md, cl = load_model(model), load_cluster(cluster, nodes)
    w = Workload(phase="both", batch=batch, isl=isl, osl=osl)
    ev = StrategyEvaluator(md, cl, w, cost_model_for(cl))
    chunk = default_chunk("sglang", cl)
    assert batch * isl >= chunk  # one engine step: the chunk, in both models
    checked = 0
    for s in enumerate_strategies(nodes, cl.gpus_per_node, any_divisor=False):
        if s.fused or ev(s) is None:
            continue
        lay = _serve_layout(s)
        b = ev.memory(s)
        need = math.ceil(batch / s.attn_dp) * (isl + osl)
        try:
            cap = kv_capacity_tokens(md, cl, lay, chunk)
        except MoeplanError:  # weights alone do not fit: nor does the strategy
            assert not b.fits(cl.gpu.mem_bytes), s.label
            continue
        assert b.fits(cl.gpu.mem_bytes) == (need <= cap), (s.label, need, cap)
        _, before_kv = mem.kv_capacity(md, lay.memory_shape(md), cl.gpu.mem_bytes, chunk)
        if s.pp == 1:
            assert b.total - b.kv_cache == pytest.approx(before_kv, rel=1e-12)
        checked += 1
    assert checked >= 5


def test_deepseek_v3_on_16_h800_nodes_fits_its_batch() -> None:
    """DeepSeek-V3, 8,192 requests of 4,096 + 1,786 tokens on 16x8 H800: the layout the
    serving simulator gives room for (attn TP1xDP128 / MoE TP1xEP128) fits the planner too."""
    md, cl = load_model("deepseek-v3"), load_cluster("h800-sxm-8", 16)
    w = Workload(phase="both", batch=8192, isl=4096, osl=1786)
    ev = StrategyEvaluator(md, cl, w, cost_model_for(cl))
    s = Strategy(attn_tp=1, attn_dp=128, moe_tp=1, moe_ep=128)
    cap = kv_capacity_tokens(md, cl, _serve_layout(s), default_chunk("sglang", cl))
    assert cap >= 64 * (4096 + 1786)
    assert ev.memory(s).fits(cl.gpu.mem_bytes)


@pytest.mark.parametrize("kv_dtype", ["auto", "fp8"])
def test_phase_memory_is_the_serving_pool_model(kv_dtype: str) -> None:
    """serve-sim --phase sizes a step with the same model: DeepSeek-V3 at EP72 with 32
    redundant experts on 9x8 H100, its bytes before KV equal the KV pool's, and a batch fits
    exactly when the pool (same KV dtype) holds its KV tokens."""
    from moeplan.serve.iteration.instance_knobs import InstanceKnobs
    from moeplan.serve.iteration.phase import PhaseModel

    md, cl = load_model("deepseek-v3"), load_cluster("h100-sxm-8", 9)
    lay = ServeLayout(attn_dp=72, moe_ep=72, redundant_experts=32)
    knobs = InstanceKnobs(kv_dtype=kv_dtype)
    pm = PhaseModel(md, cl, cost_model_for(cl), lay, knobs)
    cap = kv_capacity_tokens(md, cl, lay, 72 * 256, kv_scale=knobs.kv_scale)
    b = pm.memory(256, 2000, 256)
    _, before_kv = mem.kv_capacity(
        md, replace(lay.memory_shape(md), kv_scale=knobs.kv_scale), cl.gpu.mem_bytes, 72 * 256
    )
    assert sum(v for k, v in b.items() if k != "kv_cache") == pytest.approx(before_kv, rel=1e-12)
    assert cap >= 256 * 2000
    with pytest.raises(MoeplanError, match="phase step needs"):
        pm.memory(1, cap + 1, 256)
