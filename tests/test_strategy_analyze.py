"""MixServe analyzer: ranking/SLO/Pareto against brute force, Eq. 6 and Eq. 8 against hand
computations, memory feasibility of every output, the paper's prefill ordering on 910B."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.planners.strategy.analyzer import (
    analyze,
    meets_slo,
    pareto_front,
    rank_key,
    to_plan,
    zipf_routing,
)
from moeplan.planners.strategy.cost import PhaseTime, StrategyEvaluator, StrategyResult
from moeplan.planners.strategy.space import enumerate_strategies, mixserve_default
from moeplan.specs import Workload, load_cluster, load_model


def _fake_result(s: Layout, ttft: float, itl: float, thr: float, mem: float) -> StrategyResult:
    pt = PhaseTime(compute_s=1.0, comm_s=0.0, p2p_s=0.0, comm_unfused_s=0.0)
    return StrategyResult(
        strategy=s,
        ttft_s=ttft,
        itl_s=itl,
        throughput_tokens_per_s=thr,
        num_gpus=s.world_size,
        mem_bytes_per_gpu=mem,
        mem_capacity_bytes=1.0,
        memory={},
        prefill=pt,
        decode=pt,
        rho=None,
        stable=True,
    )


class FakeCost:
    """Constant compute times and a simple collective law, for hand-computable Eq. 6."""

    def attention_layer(self, model, num_seqs, q_len, ctx_len, tp=1):
        return 1.0

    def expert_ffn(self, model, tokens_per_expert, num_local_experts, tp=1):
        return 2.0

    def shared_expert(self, model, tokens, tp=1):
        return 0.5

    def dense_mlp(self, model, tokens, tp=1):
        return 3.0

    def gemm(self, m, n, k):
        return 0.0

    def p2p(self, nbytes, inter_node):
        return 0.25

    def collective(self, op, nbytes, group_size, nodes=1):
        scale = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.5}
        return scale[op] * (1e-5 * group_size + nbytes / (400e9 if nodes == 1 else 25e9))


@settings(max_examples=examples(40), deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.1, 10), st.floats(0.01, 1), st.floats(1, 1e4), st.floats(0, 2)),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from(["throughput", "ttft", "itl"]),
    st.one_of(st.none(), st.floats(0.1, 10)),
    st.one_of(st.none(), st.floats(0.01, 1)),
)
def test_analyze_ranking_and_filters_match_brute_force(values, rank_by, ttft_slo, itl_slo):
    space = enumerate_strategies(4, 8)
    table = {s: values[i % len(values)] for i, s in enumerate(space)}
    ev = lambda s: _fake_result(s, *table[s])  # noqa: E731
    model, cluster = load_model("qwen3-235b-a22b"), load_cluster("mixserve-910b")
    fits = [s for s in space if table[s][3] <= 1.0]
    if not fits:
        with pytest.raises(MoeplanError, match="GiB per GPU"):
            analyze(model, cluster, Workload(), None, evaluate=ev)
        return
    a = analyze(
        model,
        cluster,
        Workload(),
        None,
        evaluate=ev,
        rank_by=rank_by,
        ttft_slo_s=ttft_slo,
        itl_slo_s=itl_slo,
    )
    want = [
        s
        for s in fits
        if (ttft_slo is None or table[s][0] <= ttft_slo)
        and (itl_slo is None or table[s][1] <= itl_slo)
    ]
    col = {"ttft": 0, "itl": 1, "throughput": 2}[rank_by]
    sign = -1 if rank_by == "throughput" else 1
    got = [r.strategy for r in a.strategies]
    assert set(got) == set(want)
    assert [sign * table[s][col] for s in got] == sorted(sign * table[s][col] for s in want)
    assert a.rejected_memory == len(space) - len(fits)


@given(st.lists(st.tuples(st.floats(0.1, 10), st.floats(1, 1e4)), min_size=1, max_size=30))
def test_pareto_front_matches_brute_force(points):
    s = mixserve_default(2, 8)
    rs = [_fake_result(s, t, 0.1, thr, 0.5) for t, thr in points]
    front = pareto_front(rs)

    def dominated(r):
        return any(
            o.ttft_s <= r.ttft_s
            and o.throughput_per_gpu >= r.throughput_per_gpu
            and (o.ttft_s < r.ttft_s or o.throughput_per_gpu > r.throughput_per_gpu)
            for o in rs
        )

    want = {(r.ttft_s, r.throughput_per_gpu) for r in rs if not dominated(r)}
    assert {(r.ttft_s, r.throughput_per_gpu) for r in front} == want


def test_eq6_service_time_hand_computation():
    """Eq. 6 with constant compute: sum over layers + (pp-1) P2P; MixServe fused comm."""
    model, cluster = load_model("deepseek-v3"), load_cluster("mixserve-910b")
    w = Workload(batch=16, isl=1024, osl=64)
    ev = StrategyEvaluator(model, cluster, w, FakeCost())
    s = Layout(attn_tp=8, attn_dp=2, moe_tp=8, moe_ep=2, pp=2, fused=True)
    pre = ev.phase_time(s, 1024, 1024)
    assert pre.compute_s == pytest.approx(58 * (1 + 2 + 0.5) + 3 * (1 + 3))
    assert pre.p2p_s == pytest.approx(0.25)
    fake = FakeCost()
    x = 8 * 1024 * model.hidden_bytes
    chunk = x * 8 / (2 * 8)
    ag = 1e-5 * 8 + chunk * 8 / 400e9  # one chunk's tp slices, TP8 inside a node
    attn = 2 * (1e-5 * 8 + x / 400e9)
    fused_ag = max(2 * ag, 0.25 + ag)  # Alg. 2: one inter round (P2P 0.25 s) overlapped
    fused_rs = max(2 * ag, 0.25 + ag) + (1e-5 * 8 + x / 400e9)  # Alg. 1 + output AG
    a2a = fake.collective("all_to_all", chunk * 2, 2, 2)
    seq = 2 * (a2a + 1e-5 * 8 + chunk * 16 / 400e9) + (1e-5 * 8 + x / 400e9)
    moe = attn + min(fused_ag + fused_rs, seq)
    dense = 2 * attn
    assert pre.comm_s == pytest.approx(58 * moe + 3 * dense, rel=1e-9)


def test_eq8_weights_of_pure_ep_match_model_totals():
    """attn DP=W, MoE EP=W: each GPU holds everything but (W-1)/W of the routed experts."""
    model, cluster = load_model("qwen3-235b-a22b"), load_cluster("mixserve-910b")
    ev = StrategyEvaluator(model, cluster, Workload(batch=1, isl=16, osl=1), FakeCost())
    mem = ev.memory(Layout(attn_tp=1, attn_dp=32, moe_tp=1, moe_ep=32))
    routed = (
        model.num_moe_layers * model.num_experts * model.expert_params * model.expert_weight_bytes
    )
    assert mem.weights == pytest.approx(model.weight_bytes_total() - routed * 31 / 32, rel=1e-6)


def test_every_output_strategy_fits_memory():
    model, cluster = load_model("deepseek-v3"), load_cluster("mixserve-h20")
    w = Workload(batch=512, isl=4096, osl=512)  # KV of 512 requests: some layouts overflow
    a = analyze(model, cluster, w, cost_model_for(cluster))
    assert a.strategies and a.rejected_memory > 0
    assert all(r.mem_bytes_per_gpu <= cluster.gpu.mem_bytes for r in a.strategies)


def test_model_that_fits_nowhere_names_memory_needed():
    model, cluster = load_model("deepseek-v3"), load_cluster("findep-b")
    with pytest.raises(MoeplanError, match=r"needs at least [\d.]+ GiB per GPU"):
        analyze(model, cluster, Workload(batch=1, isl=128, osl=16), cost_model_for(cluster))


@pytest.mark.parametrize("model_name", ["deepseek-v3", "qwen3-235b-a22b"])
def test_hybrid_beats_pure_ep_and_tp_pp_for_prefill_on_910b(model_name):
    """Paper Fig. 10a direction on the 910B cluster (16 requests of 2048 tokens)."""
    model, cluster = load_model(model_name), load_cluster("mixserve-910b")
    a = analyze(
        model,
        cluster,
        Workload(batch=16, isl=2048, osl=256),
        cost_model_for(cluster),
        rank_by="ttft",
    )
    mix = next(r for r in a.strategies if r.strategy == mixserve_default(4, 8))
    assert mix.ttft_s < a.baselines["vllm-dp-ep"].ttft_s
    assert mix.ttft_s < a.baselines["vllm-tp-pp"].ttft_s
    assert mix.prefill.comm_s < mix.prefill.comm_unfused_s


def test_plan_dict_layout_invariants():
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("mixserve-h20")
    a = analyze(model, cluster, Workload(batch=8, isl=512, osl=64), cost_model_for(cluster))
    for r in a.strategies:
        p = to_plan(r, model="qwen3-30b-a3b", cluster=cluster.name, baselines=a.baselines).to_dict()
        lay = p["layout"]
        assert p["schema"] == "moeplan.plan/1" and p["family"] == "strategy"
        assert (
            lay["attn"]["tp"] * lay["attn"]["dp"]
            == lay["moe"]["tp"] * lay["moe"]["ep"]
            == lay["world_size"] // lay["pp"]
        )
        assert p["details"]["fused"] == r.strategy.fused
        assert math.isfinite(p["predicted"]["ttft_s"])


def test_rank_key_rejects_unknown_metric():
    with pytest.raises(MoeplanError, match="rank_by"):
        rank_key("latency")


def test_meets_slo_bounds():
    r = _fake_result(mixserve_default(2, 8), 1.0, 0.05, 10.0, 0.5)
    assert meets_slo(r, 1.0, 0.05) and not meets_slo(r, 0.9, None)
    assert not meets_slo(r, None, 0.04)


def test_unstable_queue_ranks_after_stable_ones():
    """A saturated deployment (rho >= 1) never outranks a stable one, whatever its capacity."""
    model, cluster = load_model("deepseek-v3"), load_cluster("mixserve-910b")
    w = Workload(batch=16, isl=2048, osl=256, rate=1.0)
    a = analyze(model, cluster, w, cost_model_for(cluster))
    flags = [r.stable for r in a.strategies]
    assert True in flags and False in flags
    assert flags == sorted(flags, reverse=True)
    assert all(math.isinf(r.ttft_s) for r in a.strategies if not r.stable)
    assert all(r.rho is not None and r.rho >= 1 for r in a.strategies if not r.stable)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.0, 1.5), st.integers(0, 1000))
def test_imbalance_grows_with_ep_degree(skew, seed):
    """Finer contiguous expert groups can only raise max/mean load (nested partitions)."""
    model, cluster = load_model("qwen3-235b-a22b"), load_cluster("mixserve-910b")
    w = Workload(routing=zipf_routing(model.num_experts, model.top_k, skew, seed))
    ev = StrategyEvaluator(model, cluster, w, FakeCost())
    imb = [ev.imbalance(ep) for ep in (1, 2, 4, 8, 16, 32)]
    assert imb[0] == 1.0
    assert all(a <= b * (1 + 1e-12) for a, b in zip(imb, imb[1:], strict=False))


def test_expert_skew_hurts_wide_ep_more_than_the_hybrid():
    """§I: EP suffers load imbalance at high degree; EP32 loses more TTFT than TP8 x EP4."""
    model, cluster = load_model("deepseek-v3"), load_cluster("mixserve-910b")
    cm = cost_model_for(cluster)
    mix = mixserve_default(4, 8)
    ep = Layout(attn_tp=8, attn_dp=4, moe_tp=1, moe_ep=32)
    out = []
    for skew in (0.0, 0.8):
        w = Workload(
            batch=16,
            isl=2048,
            osl=256,
            routing=zipf_routing(model.num_experts, model.top_k, skew, 3),
        )
        ev = StrategyEvaluator(model, cluster, w, cm)
        out.append(ev(ep).ttft_s / ev(mix).ttft_s)
    assert out[1] > out[0] > 1.0


def test_node_counts_enumerate_smaller_deployments():
    model, cluster = load_model("qwen3-235b-a22b"), load_cluster("mixserve-910b")
    w = Workload(batch=16, isl=2048, osl=256)
    a = analyze(model, cluster, w, cost_model_for(cluster), node_counts=[1, 2, 4])
    want = sum(len(enumerate_strategies(n, 8)) for n in (1, 2, 4))
    assert a.evaluated + a.rejected_shape == want
    assert {r.num_gpus for r in a.strategies} <= {8, 16, 32}
    assert all(r.strategy.world_size == r.num_gpus for r in a.strategies)
    assert len({r.num_gpus for r in a.pareto}) > 1
    with pytest.raises(MoeplanError, match="node count"):
        analyze(model, cluster, w, cost_model_for(cluster), node_counts=[8])
