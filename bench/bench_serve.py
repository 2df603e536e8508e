"""Serving simulator speed, bucketing error, and the layout search a planner calls.

- ``simulate``: 10 000 requests of a decode-heavy workload (prompt 256, output lognormal
  median 1024) on DeepSeek-V3, 2 x 8 H100, attention DP16 + EP16 (SGLang scheduler), with the
  real cost model: cold (fresh iteration model, every cost-model call counted) and warm. The
  reference is a trivial Python loop touching every output token once (one add, one compare)
  in the same run; ``ratio`` = simulation time / loop time. Target: <= 1 s.
- ``bucketing``: the decode context is rounded to a 1/32 relative grid before the memoised
  iteration-time call; the row gives the largest relative error of the iteration time that
  causes over 2 000 random (batch, context) points of the same model and layout.
- ``evaluate_layouts``: five layouts of DeepSeek-V3 on 2 x 8 H100 (engine-knob search + rate
  bisection under a TTFT/TPOT SLO + final simulation each). Target: well under 10 s.
"""

from __future__ import annotations

import time

import numpy as np

from moeplan.cost import cost_model_for
from moeplan.search import evaluate_layouts
from moeplan.serve import (
    SLO,
    Batch,
    IterationModel,
    LengthDist,
    ServeLayout,
    ServeWorkload,
    engine_config,
    generate,
    simulate,
)
from moeplan.serve.engine.run import bucket
from moeplan.specs import load_cluster, load_model

REQUESTS = 10_000


def _setup():
    model = load_model("deepseek-v3")
    cluster = load_cluster("h100-sxm-8").with_nodes(2)
    return model, cluster, cost_model_for(cluster), ServeLayout(attn_dp=16, moe_ep=16)


def _token_loop(n: int) -> float:
    t0 = time.perf_counter()
    x = 0.0
    for _ in range(n):
        y = x + 1e-3
        if y > x:
            x = y
    return time.perf_counter() - t0


def _simulate_rows(model, cluster, cost, layout) -> list[dict]:
    w = ServeWorkload(
        num_requests=REQUESTS,
        rate=12.0,
        isl=LengthDist(mean=256),
        osl=LengthDist.parse("lognormal:1024:0.5:4096"),
        seed=0,
    )
    reqs = generate(w)
    cfg = engine_config("sglang", model, cluster, layout)
    tokens = int(reqs.osl.sum())
    base = min(_token_loop(tokens) for _ in range(3))
    rows = []
    it = IterationModel(model, cluster, cost, layout)
    for label in ("cold", "warm"):
        t0 = time.perf_counter()
        res = simulate(reqs, cfg, it)
        dt = time.perf_counter() - t0
        rows.append(
            {
                "name": f"simulate {REQUESTS} requests, decode-heavy, DSv3 DP16+EP16 ({label} cache)",
                "value": dt,
                "unit": "s",
                "reference": base,
                "ratio": dt / base,
                "target": "<= 1 s",
                "note": f"{len(res.iter_end_s)} iterations, {tokens} output tokens, "
                f"{it.cache_size} memoised batches, {res.preemptions} preemptions; "
                "reference = trivial loop over every output token",
            }
        )
    return rows


def _bucketing_row(model, cluster, cost, layout) -> dict:
    it = IterationModel(model, cluster, cost, layout)
    rng = np.random.default_rng(0)
    err = 0.0
    for n, c in zip(rng.integers(1, 1025, 2000), rng.integers(1, 32_768, 2000), strict=True):
        exact = it(Batch(int(n), int(c), ()))
        err = max(err, abs(it(Batch(int(n), bucket(int(c)), ())) - exact) / exact)
    return {
        "name": "bucketing error of the decode iteration time (max over 2000 points)",
        "value": err,
        "unit": "relative",
        "reference": 1 / 64,
        "ratio": err * 64,
        "target": "<= 1/64 (context error bound)",
        "note": "reference = the context's own bound; ratio = error / bound",
    }


def _layouts_row(model, cluster, cost) -> dict:
    lays = [
        ServeLayout(attn_dp=16, moe_ep=16),
        ServeLayout(attn_tp=8, attn_dp=2, moe_ep=16),
        ServeLayout(attn_dp=8, moe_ep=8, pp=2),
        ServeLayout(attn_tp=4, attn_dp=4, moe_ep=16),
        ServeLayout(attn_tp=8, moe_ep=8, pp=2),
    ]
    w = ServeWorkload(
        num_requests=1000, rate=4.0, isl=LengthDist(mean=2048), osl=LengthDist(mean=256), seed=0
    )
    t0 = time.perf_counter()
    res = evaluate_layouts(model, cluster, cost, lays, w, SLO(ttft_s=2.0, tpot_s=0.1))
    dt = time.perf_counter() - t0
    base = _token_loop(1_000_000)
    ok = sum(r.feasible for r in res)
    return {
        "name": "evaluate_layouts: 5 DSv3 layouts on 2x8 H100 (search + 1000-request run)",
        "value": dt,
        "unit": "s",
        "reference": base,
        "ratio": dt / base,
        "target": "well under 10 s",
        "note": f"{ok} feasible; reference = trivial loop of 1M steps",
    }


def run() -> list[dict]:
    model, cluster, cost, layout = _setup()
    rows = _simulate_rows(model, cluster, cost, layout)
    rows.append(_bucketing_row(model, cluster, cost, layout))
    rows.append(_layouts_row(model, cluster, cost))
    return rows


MIXSERVE_BASELINES = {  # MixServe Table II, H20 column (2 x 8 H20)
    "vLLM TP8 PP2": ServeLayout(attn_tp=8, moe_tp=8, pp=2),
    "vLLM TP8+DP2, EP16": ServeLayout(attn_tp=8, attn_dp=2, moe_ep=16),
    "vLLM TP4+DP4, EP16": ServeLayout(attn_tp=4, attn_dp=4, moe_ep=16),
    "Tutel TP8+DP2, TP8+EP2": ServeLayout(attn_tp=8, attn_dp=2, moe_tp=8, moe_ep=2),
    "Tutel TP4+DP4, TP4+EP4": ServeLayout(attn_tp=4, attn_dp=4, moe_tp=4, moe_ep=4),
}


def mixserve_comparison() -> None:
    """MixServe §IV-B setup simulated: mean TTFT / p50 ITL (ms) at 2, 4, 8 req/s, batch cap
    16, ShareGPT-like lengths (lognormal prompt median 300, output median 200, <= 4096)."""
    from moeplan.search.colocated.evaluate import run_workload

    cluster = load_cluster("mixserve-h20")
    cost = cost_model_for(cluster)
    print("| model | layout | 2 req/s | 4 req/s | 8 req/s |\n|---|---|---|---|---|")
    for name in ("deepseek-v3", "qwen3-235b-a22b"):
        model = load_model(name)
        for label, lay in MIXSERVE_BASELINES.items():
            cells = []
            for rate in (2.0, 4.0, 8.0):
                w = ServeWorkload(
                    num_requests=400,
                    rate=rate,
                    seed=0,
                    isl=LengthDist.parse("lognormal:300:1.0:3072"),
                    osl=LengthDist.parse("lognormal:200:0.8:1024"),
                )
                cfg = engine_config("vllm", model, cluster, lay, max_running=16)
                it = IterationModel(model, cluster, cost, lay)
                _, m = run_workload(cfg, w, it, lay.gpus, SLO())
                cells.append(f"{m.mean_ttft_s * 1e3:,.0f} / {m.itl_p50_s * 1e3:.1f}")
            print(f"| {name} | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    import sys

    if "--papers" in sys.argv:
        mixserve_comparison()
    else:
        for row in run():
            print(row)
