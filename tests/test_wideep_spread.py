"""The busiest EP rank of one batch (cost/ep_spread.py) against brute-force sampling: tokens
routed to distinct experts, replicas of DeepSeek's EPLB reference placement."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from moeplan.cost.ep_spread import balanced_spread, max_of_normals, spread
from moeplan.kernel_tables import engine_cost_model
from moeplan.specs import load_cluster, load_model

REF = json.loads((Path(__file__).parent / "data" / "eplb_reference_vectors.json").read_text())


def _close(got: float, draws: np.ndarray) -> None:
    """The computed excess over the mean within 10 % of the sampled one, plus 3 standard
    errors of the sampled mean."""
    mc = float(draws.mean())
    se = float(draws.std(ddof=1) / np.sqrt(len(draws)))
    assert abs((got - 1) - (mc - 1)) <= 0.1 * (mc - 1) + 3 * se, (got, mc, se)


def test_max_of_two_normals_is_the_closed_form():
    assert max_of_normals(2) == pytest.approx(1 / np.sqrt(np.pi), rel=1e-6)
    assert max_of_normals(1) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(("tokens", "ep"), [(256, 32), (96, 8)])
def test_uniform_topk_routing_against_sampled_batches(tokens, ep):
    """Each token picks 8 distinct experts of 256 uniformly; ranks hold contiguous blocks."""
    rng = np.random.default_rng(7)
    e, k, trials = 256, 8, 300
    per = e // ep
    draws = np.empty(trials)
    for i in range(trials):
        top = np.argpartition(rng.random((tokens, e), dtype=np.float32), k, axis=1)[:, :k]
        counts = np.bincount((top // per).ravel(), minlength=ep)
        draws[i] = counts.max() / (tokens * k / ep)
    _close(balanced_spread(tokens, ep, k, e), draws)


def test_eplb_reference_placement_against_sampled_batches():
    """DeepSeek's EPLB README example (layer 0: 12 experts, 16 replicas on 8 GPUs): a token's
    expert drawn by the reference weights, its replica uniformly; the shares of the GPUs are
    the placement's expected loads."""
    case = REF["exact_cases"][0]
    w = np.asarray(case["weight"][0], float)
    phy2log = np.asarray(case["expected_phy2log"][0])
    cnt = np.asarray(case["expected_logcnt"][0], float)
    gpus, tokens = case["num_gpus"], 400
    slot_p = w[phy2log] / cnt[phy2log] / w.sum()
    shares = slot_p.reshape(gpus, -1).sum(axis=1)
    rng = np.random.default_rng(11)
    counts = rng.multinomial(tokens, slot_p, size=4000).reshape(4000, gpus, -1).sum(axis=2)
    _close(spread(tokens, shares, 1, len(w)), counts.max(axis=1) / (tokens / gpus))
    assert shares.max() * gpus > 1.0  # the reference placement is itself uneven
    assert spread(tokens, shares, 1, len(w)) > shares.max() * gpus


def test_spread_falls_with_the_batch():
    big, small = balanced_spread(262_144, 32, 8, 256), balanced_spread(4_096, 32, 8, 256)
    assert 1.0 < big < small
    assert balanced_spread(1e9, 32, 8, 256) == pytest.approx(1.0, abs=1e-3)


def test_wide_ep_prices_the_busiest_rank_of_the_batch():
    """A decode batch's busiest rank (the spread) raises the busiest receiver's DeepEP time
    over the rank's expected load (the masked grouped GEMM at 128 tokens per rank reads the
    same weights: not lower); ``batch_spread=False`` prices the expected load (a table row's
    rank 0)."""
    w = engine_cost_model(load_cluster("h100-sxm-8", 9), engine="sglang").wide_ep
    md = load_model("deepseek-v3")
    mean = w.moe(md, 128, 72, redundant=32, phase="generation", batch_spread=False)
    busy = w.moe(md, 128, 72, redundant=32, phase="generation")
    hot = w.moe(md, 128, 72, redundant=32, phase="generation", batch_spread=False,
                imbalance=balanced_spread(128 * 72, 72, md.top_k, md.num_experts))  # fmt: skip
    assert busy.gemm >= mean.gemm and busy.dispatch > mean.dispatch
    assert busy.combine > mean.combine
    assert busy == hot


def test_phase_answer_reports_the_priced_busiest_rank():
    """``--phase`` reports the busiest rank it prices: balanced routing on the DeepEP path is
    the spread of one two-batch-overlap half (8,192 tokens per GPU over EP32: 1.008)."""
    from moeplan.serve.iteration.instance_knobs import resolve_knobs
    from moeplan.serve.iteration.phase import PhaseModel
    from moeplan.serve.layout import ServeLayout

    md, c = load_model("deepseek-v3"), load_cluster("h100-sxm-8", 4)
    lay = ServeLayout(attn_dp=32, moe_ep=32, redundant_experts=32)
    kn = resolve_knobs("sglang", md, c, lay, a2a="deepep", tbo=True, mtp=0, mtp_accept=None)
    r = PhaseModel(md, c, engine_cost_model(c, engine="sglang"), lay, kn).step(
        "prefill", 16384, 4096
    )
    assert r.imbalance == pytest.approx(balanced_spread(8192 * 32, 32, 8, 256), rel=1e-12)
    assert 1.005 < r.imbalance < 1.011


@pytest.mark.parametrize(("ep", "nodes", "want"), [(32, 4, 1.0), (72, 9, 4 / (256 / 72))])
def test_equal_expert_loads_after_eplb_against_the_packing_closed_form(ep, nodes, want):
    """Equal per-expert loads, 256 experts + 32 replicas (serve/iteration/balance.py docstring): at EP32
    every GPU takes 7 whole + 2 half loads (balanced); at EP72 (4 slots per GPU) 64 GPUs take
    3 whole + 1 half and 8 take 4 whole, the busiest 4 / (256 / 72) = 1.125x the mean. The
    spread of a 128-per-GPU batch on those shares lies below the product the wide-EP price
    takes (its upper bound) and above the placement alone."""
    from moeplan.planners.placement.eplb import rebalance_experts
    from moeplan.serve.iteration.balance import layer_imbalances
    from moeplan.serve.layout import ServeLayout
    from moeplan.specs import RoutingProfile

    md = load_model("deepseek-v3")
    route = RoutingProfile(top_k=8, expert_load=((1.0,) * 256,))
    lay = ServeLayout(attn_dp=ep, moe_ep=ep, redundant_experts=32)
    got = layer_imbalances(route, md, lay, 1.0, nodes)
    assert got[0] == pytest.approx(want, rel=1e-6)
    groups = 8 if 8 % nodes == 0 else 1
    phy2log, _, cnt = rebalance_experts(np.ones((1, 256)), 288, groups, nodes, ep)
    shares = (1.0 / cnt[0][phy2log[0]]).reshape(ep, -1).sum(axis=1) / 256
    exact = spread(128 * ep, shares, 8, 256)
    assert want <= exact <= want * balanced_spread(128 * ep, ep, 8, 256) + 1e-12
