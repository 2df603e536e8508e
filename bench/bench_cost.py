"""Cost-model evaluation rate: MoE-layer cost evaluations per second.

Reference (same run): a bare Python loop doing the same number of float multiply-adds
as an α-β evaluation, so the ratio says how much the cost model's structure costs.
"""

from __future__ import annotations

import time

from moeplan.cost import cost_model_for
from moeplan.specs import load_cluster, load_model


def _layer_cost(cm, m, tokens: int) -> float:
    return (
        cm.attention_layer(m, tokens // 1024 or 1, 1024, 1024, tp=8)
        + cm.expert_ffn(m, tokens * m.top_k / m.num_experts, m.num_experts / 8)
        + cm.collective("all_to_all", tokens * m.hidden_bytes * m.top_k / 8, 8)
        + cm.collective("all_reduce", tokens * m.hidden_bytes, 8)
    )


def run() -> list[dict]:
    cm = cost_model_for(load_cluster("h100-sxm-8"))
    m = load_model("deepseek-v3")
    n = 3000
    t0 = time.perf_counter()
    for i in range(n):
        _layer_cost(cm, m, 1024 + i)
    dt = time.perf_counter() - t0
    t0 = time.perf_counter()
    acc = 0.0
    for i in range(n * 12):
        acc += 3e-6 + 1e-12 * i
    ref = time.perf_counter() - t0
    rate = n / dt
    return [
        {
            "name": "MoE layer cost evaluations (attn+experts+a2a+allreduce)",
            "value": rate,
            "unit": "evals/s",
            "reference": n / ref,
            "ratio": rate / (n / ref),
            "target": "",
            "note": "reference = 12 bare alpha-beta evaluations per eval",
        }
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
