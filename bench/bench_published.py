"""Published wide-EP deployments of DeepSeek-V3/R1, predicted by ``serve-sim --phase``.

Each row is a deployment whose setup its source states (layout, batch, context), expressed in
moeplan at that layout, and its published per-GPU throughput. Sources (read with the search
tool; figures transcribed, not fitted):

- ``lmsys``: lmsys.org blog 2025-05-05 "Deploying DeepSeek with PD Disaggregation and
  Large-scale Expert Parallelism on 96 H100 GPUs" and its reproduction instructions
  (sgl-project/sglang issue #6017): prefill EP32 over 4 nodes, DP attention, DeepEP normal,
  two-batch overlap, 32 redundant experts (EPLB), 16,384 tokens per GPU; 54.5k / 50.3k input
  tokens/s per node at 2K / 4K prompts with the expert distribution of their data (EPLB
  from statistics "matching the input/output data"), and 59.3k per node at 4K with
  "simulated perfect EPLB" (random expert selection under group-limited routing: balanced
  routing, what moeplan prices without a routing trace). Decode EP72 over 9 nodes, DeepEP low-latency, TBO,
  32 redundant experts, 256 requests per GPU at KV length 2,000: 22.3k output tokens/s per
  node.
- ``deepseek``: deepseek-ai/open-infra-index, 202502OpenSourceWeek day 6 "DeepSeek-V3/R1
  Inference System Overview" (H800): prefill EP32 / 4 nodes, decode EP144 / 18 nodes, 32
  redundant experts, two micro-batches; 24-hour averages of 73.7k input tokens/s per node
  (56.3 % of them cache hits, so 32.2k computed) and 14.8k output tokens/s per node at an
  average KV length of 4,989 and 20-22 tokens/s per user. deepseek-ai/profile-data: prefill
  profiled at 4K prompts, 16K tokens per GPU. MTP: one draft token, 85-90 % acceptance of
  the second token (DeepSeek-V3 technical report §5.4.3); the decode batch per GPU is not
  published: 1,850 / 21 tokens/s per user x 1.85 tokens per step = 88 sequences per GPU.
  Daily averages include off-peak hours: a lower bound on a saturated deployment.
- ``rtp-llm``: Alibaba RTP-LLM "DeepSeek Reproduce Tech Report" (H800, RoCE): prefill EP32,
  two 4K requests per GPU in 1.5 s (5,333 tokens/s per GPU); decode EP144 with 32 redundant
  experts and MTP, 13,200 concurrent requests (91.7 per GPU) at 4K in / 2K out (mean KV
  about 5,120) reach 20 tokens/s per user, 1,850 tokens/s per GPU.

Routing: balanced (no per-expert loads of these runs are public), the busiest EP rank of each
batch priced at the batch's token count (:mod:`moeplan.cost.ep_spread`).

Run: ``PYTHONPATH=src python bench/bench_published.py`` (prints the table of
docs/benchmarks/published.md — with, for the lmsys prefill rows, the busiest-rank imbalance
at which the price would meet the published figure — and the wide-EP layer price rate).
"""

from __future__ import annotations

import time
from typing import NamedTuple

from moeplan.kernel_tables import engine_cost_model
from moeplan.serve.iteration.instance_knobs import resolve_knobs
from moeplan.serve.iteration.phase import PhaseModel
from moeplan.serve.layout import ServeLayout
from moeplan.specs import load_cluster, load_model

DSV3 = load_model("deepseek-v3")
V3_MTP_ACCEPT = 0.85  # DeepSeek-V3 report §5.4.3: 85-90 % acceptance of the second token


class Deployment(NamedTuple):
    source: str
    cluster: str
    nodes: int
    ep: int
    redundant: int
    phase: str
    per_gpu: int
    context: int
    published: float
    mtp: int = 0
    note: str = ""


DEPLOYMENTS = (
    Deployment("lmsys", "h100-sxm-8", 4, 32, 32, "prefill", 16384, 2048, 54_543 / 8),
    Deployment("lmsys", "h100-sxm-8", 4, 32, 32, "prefill", 16384, 4096, 50_302 / 8),
    Deployment(
        "lmsys", "h100-sxm-8", 4, 32, 32, "prefill", 16384, 4096, 59_337 / 8,
        note="simulated perfect EPLB (balanced routing)",
    ),
    Deployment("lmsys", "h100-sxm-8", 9, 72, 32, "decode", 256, 2000, 22_280 / 8),
    Deployment(
        "deepseek", "h800-sxm-8", 4, 32, 32, "prefill", 16384, 4096, 32_200 / 8,
        note="24-hour average, cache misses only",
    ),
    Deployment(
        "deepseek", "h800-sxm-8", 18, 144, 32, "decode", 88, 4989, 14_800 / 8, mtp=1,
        note="24-hour average; batch from 20-22 tok/s per user",
    ),
    Deployment("rtp-llm", "h800-sxm-8", 4, 32, 32, "prefill", 8192, 4096, 5333, note="RoCE"),
    Deployment(
        "rtp-llm", "h800-sxm-8", 18, 144, 32, "decode", 92, 5120, 1850, mtp=1,
        note="RoCE; at the 20 tok/s per-user SLA",
    ),
)  # fmt: skip


def _phase_model(d: Deployment, imbalance: float = 1.0) -> PhaseModel:
    c = load_cluster(d.cluster, d.nodes)
    cm = engine_cost_model(c, engine="sglang")
    lay = ServeLayout(attn_dp=d.ep, moe_ep=d.ep, redundant_experts=d.redundant)
    kn = resolve_knobs(
        "sglang", DSV3, c, lay, a2a="deepep", tbo=True, mtp=d.mtp,
        mtp_accept=V3_MTP_ACCEPT if d.mtp else None,
    )  # fmt: skip
    return PhaseModel(DSV3, c, cm, lay, kn, imbalance=imbalance)


def predict(d: Deployment) -> tuple[float, dict[str, float]]:
    """Tokens/s per GPU of ``d``'s phase and its breakdown (ms), balanced routing (the
    busiest rank of each batch at its token count)."""
    r = _phase_model(d).step(d.phase, d.per_gpu, d.context)
    return r.tokens_per_s_per_gpu, {k: v * 1e3 for k, v in r.breakdown.items()}


def implied_imbalance(d: Deployment, hi: float = 2.0, steps: int = 14) -> float | None:
    """The busiest EP rank's load over the mean (every MoE layer) at which moeplan's price
    equals the published figure (bisection; None when balanced routing is already slower or
    ``hi`` is not enough): a diagnostic of what the routing of the published run must have
    been if the rest of the price is right, never an input to a prediction."""

    def rate(x: float) -> float:
        return _phase_model(d, x).step(d.phase, d.per_gpu, d.context).tokens_per_s_per_gpu

    lo = 1.0
    if rate(lo) <= d.published or rate(hi) > d.published:
        return None
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rate(mid) > d.published else (lo, mid)
    return (lo + hi) / 2


def layer_price_rate(n: int = 200_000) -> tuple[float, float]:
    """Memoised wide-EP layer prices per second (a decode sweep's repeated shapes), and the
    first-call (cold) rate over distinct token counts."""
    c = load_cluster("h100-sxm-8", 9)
    w = engine_cost_model(c, engine="sglang").wide_ep
    assert w is not None
    t0 = time.perf_counter()
    for i in range(200):
        w.moe(DSV3, 64 + i, 72, redundant=32, phase="generation")
    cold = 200 / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for i in range(n):
        w.moe(DSV3, 64 + i % 200, 72, redundant=32, phase="generation")
    return n / (time.perf_counter() - t0), cold


def _dict_rate(n: int = 200_000) -> float:
    """A bare dictionary look-up loop of ``n`` calls: the memo's floor, in the same run."""
    memo = {(i, 72): i for i in range(200)}
    t0 = time.perf_counter()
    for i in range(n):
        memo.get((i % 200, 72))
    return n / (time.perf_counter() - t0)


def run() -> list[dict]:
    """Rows for bench/run_all.py: predicted vs published per deployment, and the layer rate."""
    rows = []
    for d in DEPLOYMENTS:
        got, _ = predict(d)
        rows.append(
            {
                "name": f"{d.source} {d.cluster} {d.phase} EP{d.ep} x{d.per_gpu} ctx {d.context}"
                + (" (perfect EPLB)" if "perfect" in d.note else ""),
                "value": got,
                "unit": "tokens/s per GPU (predicted)",
                "reference": d.published,
                "ratio": got / d.published,
                "target": "within 15 %" if d.source == "lmsys" else "",
                "note": d.note or "published",
            }
        )
    memo, cold = layer_price_rate()
    floor = _dict_rate()
    rows.append(
        {
            "name": "wide-EP layer price (memoised)",
            "value": memo,
            "unit": "evaluations/s",
            "reference": floor,
            "ratio": memo / floor,
            "target": ">= 100k/s",
            "note": f"cold {cold:,.0f}/s; reference: bare dict look-ups",
        }
    )
    return rows


def main() -> None:
    print(
        "| source | GPU | phase | layout | per GPU | context | published | predicted | ratio "
        "| implied imbalance |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in DEPLOYMENTS:
        got, _ = predict(d)
        lay = f"EP{d.ep}+R{d.redundant}, {d.nodes} nodes" + (f", MTP{d.mtp}" if d.mtp else "")
        imp = implied_imbalance(d) if d.source == "lmsys" and d.phase == "prefill" else None
        print(
            f"| {d.source} | {d.cluster.split('-')[0].upper()} | {d.phase} | {lay} | "
            f"{d.per_gpu} | {d.context} | {d.published:,.0f} | {got:,.0f} | "
            f"{got / d.published:.2f} | {'' if imp is None else f'{imp:.3f}'} |"
        )
    memo, cold = layer_price_rate()
    print(f"\nwide-EP layer price: {memo:,.0f} memoised evaluations/s, {cold:,.0f} cold/s")


if __name__ == "__main__":
    main()
