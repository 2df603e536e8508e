"""Benchmark: MixServe full enumeration on a 4 x 8 cluster (target <= 100 ms), reported as a
ratio to evaluating one strategy from a cold evaluator in the same run."""

from __future__ import annotations

import statistics
import time

from moeplan.cost import cost_model_for
from moeplan.planners.strategy.analyzer import analyze
from moeplan.planners.strategy.cost import StrategyEvaluator
from moeplan.planners.strategy.space import mixserve_default
from moeplan.specs import Workload, load_cluster, load_model

CASES = [("deepseek-v3", "mixserve-910b", None), ("qwen3-235b-a22b", "h100-sxm-8", 4)]


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _case(model_name: str, cluster_name: str, nodes: int | None, w: Workload) -> dict:
    model, cluster = load_model(model_name), load_cluster(cluster_name, nodes)
    cm = cost_model_for(cluster)
    one = mixserve_default(cluster.num_nodes, cluster.gpus_per_node)
    ref = _median_s(lambda: StrategyEvaluator(model, cluster, w, cm)(one), 21)
    full = _median_s(lambda: analyze(model, cluster, w, cm), 7)
    n = analyze(model, cluster, w, cm).evaluated
    return {
        "name": f"enumerate {model_name} on {cluster.name} "
        f"({cluster.num_nodes}x{cluster.gpus_per_node}, {n} strategies)",
        "value": full * 1e3,
        "unit": "ms",
        "reference": ref * 1e3,
        "ratio": full / ref,
        "target": "<= 100 ms",
        "note": "reference = one strategy, cold evaluator; ratio = full/one",
    }


def run() -> list[dict]:
    w = Workload(batch=16, isl=2048, osl=256)
    return [_case(m, c, n, w) for m, c, n in CASES]


if __name__ == "__main__":
    for row in run():
        print(row)
