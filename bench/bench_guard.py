"""Sem-MoE's validation guard on traces with weakened token->expert affinity, against a large
held-out test split as the oracle.

qwen3-30b-a3b shape (128 experts, top-8), 4 MoE layers, EP8, 950 synthetic requests of 24-72
tokens: test 80 % (~760 requests, the oracle), validation 20 % of the rest (~38 requests, what
the guard sees), fit the remainder. Affinity strength s ~ U(0, 1) scales the generator's
preference, group fidelity, topic strength and Markov strength. For each seed the guard's
verdict is compared with Sem-MoE's and contiguous placement's predicted MoE-layer time on
the test split (a guard-off run gives Sem-MoE's test time when the guard falls back).

``python bench/bench_guard.py [seeds]`` prints one JSON row per seed and the counts: wrong
fallbacks (Sem-MoE faster on test, discarded) and wrong keeps (slower on test, kept).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from moeplan.cost import cost_model_for
from moeplan.planners.placement.planner import PlaceConfig, cost_evaluator, place
from moeplan.specs import load_cluster, load_model
from moeplan.traces.synthetic import SynthConfig, synthesize


def weakened_trace(seed: int, model):  # type: ignore[no-untyped-def]
    s = float(np.random.default_rng(seed).uniform(0.0, 1.0))
    cfg = SynthConfig(
        num_layers=4,
        num_experts=model.num_experts,
        top_k=model.top_k,
        vocab_size=32000,
        num_requests=950,
        min_len=24,
        max_len=72,
        seed=seed,
        pref_strength=3.0 * s,
        group_fidelity=0.85 * s,
        topic_strength=0.8 * s,
        markov_strength=s,
    )
    return s, synthesize(cfg)


def run(seeds: int) -> list[dict]:
    m = load_model("qwen3-30b-a3b")
    ev = cost_evaluator(cost_model_for(load_cluster("h100-sxm-8")), m, 8)
    kw = dict(num_layers=4, num_experts=m.num_experts, hidden_bytes=m.hidden_bytes, evaluate=ev)
    rows = []
    for seed in range(seeds):
        strength, tr = weakened_trace(seed, m)
        base = dict(ep=8, seed=seed, baselines=False, test_fraction=0.8, val_fraction=0.2)
        g = place(tr, cfg=PlaceConfig(**base), **kw)
        raw = place(tr, cfg=PlaceConfig(**base, guard=False), **kw)
        ratio = (
            raw.methods["semmoe"].metrics["moe_layer_time_s"]
            / raw.methods["contiguous"].metrics["moe_layer_time_s"]
        )
        v = g.extra["guard"]
        rows.append(
            {
                "seed": seed,
                "strength": strength,
                "test_ratio": ratio,
                "keep": v["keep"],
                "resolved": v["resolved"],
                "decision": v["decision"],
                "interval_90": v["time_ratio_interval_90"],
                "requests": v["requests"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    rows = run(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
    wf = [r for r in rows if not r["keep"] and r["test_ratio"] < 1]
    wk = [r for r in rows if r["keep"] and r["test_ratio"] > 1]
    print(
        f"fallbacks {sum(not r['keep'] for r in rows)}, of which better on test {len(wf)} "
        f"(max {max((1 - r['test_ratio'] for r in wf), default=0):.1%}); keeps "
        f"{sum(r['keep'] for r in rows)}, of which worse on test {len(wk)} "
        f"(max {max((r['test_ratio'] - 1 for r in wk), default=0):.1%}); unresolved "
        f"{sum(not r['resolved'] for r in rows)}"
    )
