"""Kernel prices at the edges of the measured tables: prefill chunks over a long prefix,
MoE token counts past a shape's last measured row, and GPUs whose datasheet equals a table
GPU's (their transfer ratio is 1)."""

from __future__ import annotations

import numpy as np
import pytest

from moeplan.cost import CostModel
from moeplan.cost.kerneldb import device_for
from moeplan.cost.kerneldb.pricing import equivalent_prefill
from moeplan.kernel_tables import kernel_db
from moeplan.specs import load_cluster, load_model

#: DeepSeek-V3's routed experts as the H100 SGLang fused-MoE table measured them
DSV3_MOE = {
    "hidden_size": 7168,
    "inter_size": 2048,
    "topk": 8,
    "num_experts": 256,
    "moe_dtype": "fp8_block",
}
#: the measured H100 rows fall by up to 0.93 % from one token count to the next along a
#: shape line (timing noise of the SGLang fused-MoE table, DeepSeek-V3 shapes, EP 1-256)
TABLE_NOISE = 0.01


def _moe(cluster: str, ep: int, tokens: np.ndarray) -> np.ndarray:
    n = len(tokens)
    cols = {k: np.full(n, v) for k, v in DSV3_MOE.items()}
    cols.update(num_tokens=tokens, moe_ep_size=np.full(n, ep))
    dev = device_for(load_cluster(cluster))
    return np.array([p.seconds for p in kernel_db().predict_many("moe", dev, "sglang", cols)])


def test_equivalent_prefill_scores_the_same_pairs() -> None:
    """Closed form: L (L + 1) / 2 query-key pairs = q (ctx - (q - 1) / 2), rounded up."""
    for q, ctx in ((1, 1), (5, 4096), (64, 4096), (1024, 4096), (4096, 4096), (3, 10)):
        ell = equivalent_prefill(q, ctx)
        pairs = q * (ctx - (q - 1) / 2)
        assert ell * (ell + 1) / 2 >= pairs - 1e-9
        assert (ell - 1) * ell / 2 < pairs or ell == q
        assert q <= ell <= ctx


@pytest.mark.parametrize("cluster", ["h100-sxm-8", "findep-c"])
@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "deepseek-v3"])
def test_prefill_chunk_over_a_prefix_is_priced_like_its_work(cluster: str, model: str) -> None:
    """A chunk of q new tokens over a context c costs at least a decode step at c, no more
    than prefilling all c tokens (it is part of that work), and grows with q and with c."""
    cm = CostModel(load_cluster(cluster), engine="sglang", kernels=kernel_db())
    md = load_model(model)
    ctxs = [16, 256, 1024, 4096, 16384]
    qs = [1, 2, 5, 16, 64, 256, 1024, 4096, 16384]
    t = {(q, c): cm.attention_core(md, 1, q, c) for c in ctxs for q in qs if q <= c}
    for c in ctxs:
        col = [t[(q, c)] for q in qs if q <= c]
        assert all(b >= a * (1 - 1e-9) for a, b in zip(col, col[1:], strict=False)), (c, col)
        assert col[0] <= min(col) * (1 + 1e-9) and max(col) <= t[(c, c)] * (1 + 1e-9)
    for q in qs:
        row = [t[(q, c)] for c in ctxs if q <= c]
        assert all(b >= a * (1 - 1e-9) for a, b in zip(row, row[1:], strict=False)), (q, row)
    # five new tokens over a long prefix cost a few decode steps (they were priced at
    # ~1,250 decode steps: a 5-token prefill scaled by the keys per query)
    assert t[(5, 4096)] <= 5.0 * t[(1, 4096)]


@pytest.mark.parametrize("cluster", ["h100-sxm-8", "h800-sxm-8"])
def test_moe_price_is_monotone_past_the_table_edge(cluster: str) -> None:
    """DeepSeek-V3's fused MoE, EP 1-256, 1 to 131,072 tokens: more tokens never cost less
    (beyond the timing noise of the measured rows), in particular across the last measured
    token count (16,384) of each EP size."""
    tokens = np.unique(np.round(np.geomspace(1, 131072, 60)).astype(int))
    for ep in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        s = _moe(cluster, ep, tokens)
        worst = float((s[1:] / s[:-1]).min())
        assert worst >= 1 - TABLE_NOISE, (ep, worst)
    measured = _moe(cluster, 32, np.array([16384, 20480]))
    assert measured[1] >= measured[0]


def test_same_datasheet_gpu_gets_the_table_gpus_measured_price() -> None:
    """H800's preset has H100 SXM's compute, HBM, SMs and clock: its MoE price on every
    measured H100 row of DeepSeek-V3's shapes is the H100's measured latency (ratio 1)."""
    db = kernel_db()
    t = db.tables[("h100_sxm", "sglang", "moe")]
    c = {k: np.asarray(v) for k, v in t.columns.items()}
    sel = np.ones(len(t.latency), bool)
    for k, v in DSV3_MOE.items():
        sel &= c[k].astype(str) == str(v)
    sel &= c["distribution"].astype(str) == "balanced"
    assert sel.sum() > 20
    cols = {k: c[k][sel] for k in (*DSV3_MOE, "num_tokens", "moe_ep_size", "distribution")}
    h100 = db.predict_many("moe", device_for(load_cluster("h100-sxm-8")), "sglang", cols)
    h800 = db.predict_many("moe", device_for(load_cluster("h800-sxm-8")), "sglang", cols)
    for a, b in zip(h100, h800, strict=True):
        if a.source == "measured":
            assert b.seconds == pytest.approx(a.seconds, rel=1e-9)
            assert b.source == "transferred"


def test_deepseek_v3_decode_step_grows_across_the_moe_table_edge() -> None:
    """DeepSeek-V3 decode on 16x8 H100 at attention DP128 / EP128: 120-144 requests per GPU
    put 15,360-18,432 tokens into the EP group, across the table's last measured count
    (16,384); the step time grows with the batch (it fell from 432 to 234 ms at 136)."""
    from moeplan.serve.iteration.model import Batch, IterationModel
    from moeplan.serve.layout import ServeLayout

    cl = load_cluster("h100-sxm-8", 16)
    it = IterationModel(
        load_model("deepseek-v3"),
        cl,
        CostModel(cl, engine="sglang", kernels=kernel_db()),
        ServeLayout(attn_dp=128, moe_ep=128),
    )
    steps = [it(Batch(decode=b * 128, decode_ctx=2000)) for b in (120, 128, 136, 144)]
    assert all(b > a for a, b in zip(steps, steps[1:], strict=False)), steps


def test_same_datasheet_gpu_keeps_its_own_interconnect() -> None:
    """H800's NVLink has 400 of H100's 900 GB/s: its all-reduce is not the H100's measured
    price but slower, by at most the bandwidth ratio."""
    db = kernel_db()
    h100, h800 = (device_for(load_cluster(c)) for c in ("h100-sxm-8", "h800-sxm-8"))
    for m in (1024, 65536, 1 << 20, 1 << 24):
        a = db.predict("allreduce", h100, "sglang", message_size=m, num_gpus=8).seconds
        b = db.predict("allreduce", h800, "sglang", message_size=m, num_gpus=8).seconds
        assert a < b <= a * h100.link_bw / h800.link_bw * (1 + 1e-9)
