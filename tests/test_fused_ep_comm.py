"""The fused MoE's expert-parallel collectives without DeepEP: the engines' decision
(:meth:`EngineBackend.fused_ep_comm`) and its price (:mod:`moeplan.planners.ep_comm`),
against bytes and seconds computed by hand; the DeepEP path and the engine-less path keep
their all-to-all."""

from __future__ import annotations

import pytest

from moeplan.backends import backend
from moeplan.backends.base import EpCollective
from moeplan.cost import CostModel
from moeplan.cost.collectives import collective_time
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.ep_comm import fused_ep_seconds, group_ranks
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import resolve_knobs
from moeplan.serve.iteration.phase import PhaseModel, prefill_batch
from moeplan.specs import load_cluster, load_model

DSV3 = load_model("deepseek-v3")
H = 7168 * 2  # DeepSeek-V3's hidden state in bf16, bytes
ROUTER = 256 * 2  # its 256 router logits in bf16, bytes


class FormulaCost:
    """A cost model whose collectives are the α-β formulas alone (no measured tables), so a
    hand-written ring formula is an independent oracle."""

    def __init__(self, engine: str, cluster) -> None:
        self.engine, self.cluster = engine, cluster

    def collective(self, op: str, nbytes: float, n: int, nodes: int = 1) -> float:
        return collective_time(op, nbytes, n, nodes, self.cluster)


def test_attention_tp_is_one_all_reduce_on_every_engine():
    # the tokens are on every rank after the attention all-reduce: no dispatch, and the
    # partial expert outputs are summed over the MoE group
    for name in ("sglang", "vllm", "trtllm"):
        comm = backend(name).fused_ep_comm(1, 4, True, H, ROUTER)
        assert comm is not None and comm.dispatch == ()
        assert comm.combine == (EpCollective("all_reduce", "moe", H),)
    # TensorRT-LLM under attention DP keeps its all-to-all (MNNVL / NVLink one-sided)
    assert backend("trtllm").fused_ep_comm(2, 2, True, H, ROUTER) is None


def test_sglang_attention_dp_gathers_by_all_reduce_in_prefill_and_all_gather_in_decode():
    sg = backend("sglang")
    pre = sg.fused_ep_comm(2, 2, True, H, ROUTER)
    assert pre.dispatch == (EpCollective("all_reduce", "moe", H),)  # SUM_LEN padding mode
    assert pre.combine == (EpCollective("reduce_scatter", "moe", H),)  # reduce_scatterv
    dec = sg.fused_ep_comm(2, 2, False, H, ROUTER)
    assert dec.dispatch == (EpCollective("all_gather", "moe", H),)  # MAX_LEN padding mode
    assert dec.combine == (EpCollective("reduce_scatter", "moe", H),)
    # EP smaller than the DP size (MoE TP inside): the MoE's all-reduce, then a local slice
    assert sg.fused_ep_comm(4, 2, True, H, ROUTER).combine[0].op == "all_reduce"


def test_vllm_attention_dp_is_allgather_reducescatter_over_the_dp_group():
    comm = backend("vllm").fused_ep_comm(2, 4, True, H, ROUTER)
    assert comm.dispatch == (EpCollective("all_gather", "dp", H + ROUTER),)
    assert comm.combine == (
        EpCollective("reduce_scatter", "dp", H),
        EpCollective("all_reduce", "tp", H),
    )


def test_sglang_prefill_oracle_gb200_dp2_ep2():
    """DeepSeek-V3 on two GPUs of one NVL72 rack, attention DP 2, EP 2, 1,000 prompt tokens on
    each rank. Buffer: both ranks' tokens, 2,000 x 14,336 B = 28,672,000 B. Per rank the ring
    all-reduce (dispatch) sends 2 x (n-1)/n x 28.672 MB = 28.672 MB, the reduce-scatter
    (combine) 14.336 MB; an all-to-all of the 8 routed copies would send
    (n-1)/n x 8 x 1,000 x 14,336 B = 57.344 MB each way (4x the all-gather's 14.336 MB).
    Seconds at 900 GB/s and 10 µs per step: 2 x (10 µs + 14.336 MB / 900 GB/s) = 51.86 µs
    and 10 µs + 15.93 µs = 25.93 µs."""
    c = load_cluster("gb200-nvl72")
    lay = Layout(attn_dp=2, moe_ep=2)
    assert (c.intra.bw, c.intra.latency) == pytest.approx((900e9, 1e-5))  # the oracle's inputs
    assert group_ranks(lay, c.nvlink_domain)["moe"] == (2, 1)
    disp, comb = fused_ep_seconds(FormulaCost("sglang", c), DSV3, lay, 72, True, 2000, 1000)
    assert disp == pytest.approx(2 * (1e-5 + 14.336e6 / 900e9), rel=1e-9)
    assert comb == pytest.approx(1e-5 + 14.336e6 / 900e9, rel=1e-9)
    a2a = collective_time("all_to_all", 8 * 1000 * H, 2, 1, c)
    assert a2a == pytest.approx(1e-5 + 57.344e6 / 900e9, rel=1e-9)
    assert 57.344e6 / 14.336e6 == 4.0


def test_vllm_oracle_two_nodes_dp_group():
    """vLLM, attention TP 2 x DP 4 = EP 8 on one 8-GPU H100 node, 500 tokens per DP rank:
    all-gather over the 4 DP ranks of 2,000 x (14,336 + 512) B = 29.696 MB (each rank
    receives 3/4 of it), reduce-scatter of 2,000 x 14,336 B over them, then the TP pair's
    all-reduce of its 500 tokens."""
    c = load_cluster("h100-sxm-8")
    lay = Layout(attn_tp=2, attn_dp=4, moe_ep=8)
    b, a = c.intra.bw, c.intra.latency
    disp, comb = fused_ep_seconds(FormulaCost("vllm", c), DSV3, lay, 8, False, 2000, 500)
    assert disp == pytest.approx(3 * a + 0.75 * 2000 * (H + ROUTER) / b, rel=1e-9)
    rs = 3 * a + 0.75 * 2000 * H / b
    ar = 2 * (a + 0.5 * 500 * H / b)
    assert comb == pytest.approx(rs + ar, rel=1e-9)


def test_no_engine_and_no_ep_keep_their_paths():
    c = load_cluster("h100-sxm-8")
    assert fused_ep_seconds(CostModel(c), DSV3, Layout(attn_dp=2, moe_ep=2), 8, True, 2, 1) is None
    cm = FormulaCost("sglang", c)
    assert fused_ep_seconds(cm, DSV3, Layout(attn_tp=2, moe_tp=2), 8, True, 2, 2) is None


def _phase(a2a: str, engine: str | None = "sglang") -> PhaseModel:
    c = load_cluster("h200-sxm-8")
    lay = Layout(attn_dp=8, moe_ep=8)
    kn = resolve_knobs("sglang", DSV3, c, lay, a2a=a2a)
    cost = engine_cost_model(c, engine=engine) if engine else CostModel(c)
    return PhaseModel(DSV3, c, cost, lay, kn)


def test_phase_prices_the_engine_collectives_not_an_all_to_all():
    pm = _phase("nccl")
    r = pm.step("prefill", 8192, 4000)
    n_moe = len(DSV3.moe_layers)
    tokens = 8 * 8192  # the MoE group's tokens: every DP rank's
    disp, comb = fused_ep_seconds(pm.cost, DSV3, pm.layout, 8, True, tokens, 8192)
    assert r.breakdown["dispatch"] == pytest.approx(n_moe * disp, rel=1e-9)
    assert r.breakdown["combine"] == pytest.approx(n_moe * comb, rel=1e-9)


def test_phase_deepep_and_engineless_paths_unchanged():
    # DeepEP: dispatch / combine are DeepEP's kernels (WideEP), never the fused collectives
    pm = _phase("deepep")
    mb = prefill_batch(8192, 4000)
    pre, disp, gemm, comb = pm._moe(mb, 1.0)
    w = pm._wide.moe(DSV3, mb.tokens, 8, imbalance=1.0, phase="context", batch_spread=True)
    assert (disp, comb) == (w.dispatch, w.combine)
    # no engine: the all-to-all of the routed copies each way
    pm = _phase("nccl", engine=None)
    mb = prefill_batch(8192, 4000)
    _, disp, _, comb = pm._moe(mb, 1.0)
    a2a = pm.cost.collective("all_to_all", mb.tokens * pm._k * DSV3.hidden_bytes, 8, 1)
    assert disp == comb == pytest.approx(a2a, rel=1e-12)
