"""Instance knobs in the iteration model and the deployment search (serve/knobs.py)."""

from __future__ import annotations

import numpy as np
import pytest

from moeplan.kernel_tables import engine_cost_model
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.serve.knobs import knob_variants
from moeplan.serve.layout import ServeLayout
from moeplan.specs import load_cluster, load_model

DSV3 = load_model("deepseek-v3")


def test_iteration_two_batch_overlap_within_bounds():
    """A decode iteration with two-batch overlap: no faster than either resource's work of
    both halves, no slower than the halves in series; the sequential DeepEP iteration is the
    sum of its parts."""
    c = load_cluster("h100-sxm-8", 4)
    cm = engine_cost_model(c, engine="sglang")
    lay = ServeLayout(attn_dp=32, moe_ep=32)
    b = Batch(decode=32 * 128, decode_ctx=2000)
    seq = IterationModel(DSV3, c, cm, lay, knobs=InstanceKnobs(a2a="deepep"))
    tbo = IterationModel(DSV3, c, cm, lay, knobs=InstanceKnobs(a2a="deepep", tbo=True))
    s, t = seq.breakdown(b), tbo.breakdown(b)
    parts = ("attention", "moe", "dense", "comm", "lm_head")
    assert s["period_s"] == pytest.approx(sum(s[k] for k in parts), rel=1e-12)
    assert t["period_s"] == pytest.approx(sum(t[k] for k in parts) + t["overlap"], rel=1e-12)
    assert t["period_s"] >= max(t["comm"], t["attention"] + t["moe"]) - 1e-12
    assert t["overlap"] <= 0.0


def test_variants_cover_the_entries_and_respect_given_knobs():
    c = load_cluster("h100-sxm-8", 12)
    lay = ServeLayout(attn_dp=96, moe_ep=96)  # 256 experts do not split over 96 ranks
    got = knob_variants("sglang", DSV3, c, lay, InstanceKnobs())
    assert {(kn.a2a, kn.tbo) for _, kn in got} == {("nccl", False), ("deepep", False),
                                                    ("deepep", True)}  # fmt: skip
    assert {lay_.redundant_experts for lay_, _ in got} == {32}  # 288 = 3 x 96
    fixed = knob_variants("sglang", DSV3, c, lay, InstanceKnobs(tbo=True), frozenset({"tbo"}))
    assert {(kn.a2a, kn.tbo) for _, kn in fixed} == {("deepep", True)}
    a100 = load_cluster("a100-sxm-8", 4)
    plain = knob_variants("sglang", DSV3, a100, ServeLayout(attn_dp=32, moe_ep=32), InstanceKnobs())
    assert [(kn.a2a, kn.tbo, lay_.redundant_experts) for lay_, kn in plain] == [("nccl", False, 0)]


def _contiguous(row, ep):
    groups = [sum(row[g * len(row) // ep : (g + 1) * len(row) // ep]) for g in range(ep)]
    return max(groups) / (sum(groups) / ep)


def test_eplb_replicas_lower_the_busiest_rank():
    """Per-expert loads (Zipf-skewed): without replicas the contiguous placement's imbalance
    (brute force over the groups); EPLB with 32 replicas is no worse than it and no better
    than the mean or the hottest expert split over every replica allows."""
    from moeplan.serve.iteration.balance import layer_imbalances
    from moeplan.specs import RoutingProfile

    rng = np.random.default_rng(0)
    rows = [tuple(float(x) for x in rng.zipf(1.6, 256).clip(max=500)) for _ in range(4)]
    route = RoutingProfile(top_k=8, expert_load=tuple(rows))
    plain = layer_imbalances(route, DSV3, ServeLayout(attn_dp=32, moe_ep=32), 1.0, 4)
    eplb = layer_imbalances(
        route, DSV3, ServeLayout(attn_dp=32, moe_ep=32, redundant_experts=32), 1.0, 4
    )
    for i, (p, e) in enumerate(zip(plain, eplb, strict=False)):
        row = rows[i % 4]
        assert p == pytest.approx(_contiguous(row, 32), rel=1e-12)
        assert e <= p + 1e-12
        mean = sum(row) / 32
        # the hottest expert has at most 1 + 32 replicas, and no rank is below the mean
        assert e >= max(1.0, max(row) / 33 / mean) - 1e-12


def test_phase_takes_a_routing_trace(tmp_path, capsys):
    """--routing-trace: the busiest rank's load after EPLB enters the price (slower than
    balanced routing), and the JSON names the trace."""
    import json

    from moeplan.cli import main
    from moeplan.traces.synthetic import SynthConfig, synthesize
    from moeplan.traces.trace_writer import save_trace

    tr = synthesize(SynthConfig(num_layers=2, num_experts=256, top_k=8, num_requests=64, seed=1))
    path = tmp_path / "t.npz"
    save_trace(tr, path)
    base = ["serve-sim", "--model", "deepseek-v3", "--cluster", "h100-sxm-8", "--nodes", "4",
            "--attn-dp", "32", "--moe-ep", "32", "--redundant-experts", "32", "--a2a", "deepep",
            "--phase", "decode", "--batch-per-gpu", "64", "--context", "1000", "--json"]  # fmt: skip
    out = {}
    for key, extra in (("flat", []), ("trace", ["--routing-trace", str(path)])):
        try:
            main(base + extra)
        except SystemExit as ex:
            assert not ex.code
        out[key] = json.loads(capsys.readouterr().out)
    # balanced routing: the busiest rank of a batch only (cost/ep_spread.py); the trace adds
    # its per-expert loads after EPLB
    from moeplan.cost.ep_spread import balanced_spread

    flat = balanced_spread(64 * 32, 32, 8, 256)  # no two-batch overlap: 64 per GPU
    assert out["flat"]["busiest_rank_imbalance"] == pytest.approx(flat, rel=1e-9)
    assert out["trace"]["busiest_rank_imbalance"] > flat > 1.0
    assert out["trace"]["step_ms"] > out["flat"]["step_ms"]
    assert str(path) in out["trace"]["routing"]
