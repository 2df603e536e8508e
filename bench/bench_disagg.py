"""Colocated vs prefill/decode (PD) vs attention–FFN disaggregated decode (AFD), served.

For DeepSeek-V3 and Qwen3-235B-A22B on 2x8 and 4x8 H100 / H200 and 2x8 H20
(``mixserve-h20``), at two SLO pairs, each family's best deployment on the same serving
footing (Poisson arrivals, prompt 2048 / output 256 tokens, SGLang scheduler, the datasheet
cost model): its largest Poisson rate meeting the SLOs (p90) and the output tokens/s per
GPU that rate is (``rate * osl / GPUs``: SLO-bound capacity per GPU), and what bounds it.

- colocated: attention TP within a node × DP, MoE EP over the instance (and pure TP within a
  node), instances of the whole cluster or half of it (per-GPU figures: a half-size instance
  stands for two replicas); pruned by :func:`moeplan.search.colocated.evaluate.analytic_rate`, the best two
  simulated with their engine-knob search (:func:`moeplan.search.colocated.evaluate.evaluate_layout`),
  then their rate re-searched under the PD probe's standard: SLOs met *and* the queue not
  growing (:func:`moeplan.search.disagg.pools.queue_stable`) on a probe of at least three times the
  running-request cap (a shorter one never fills the engine; PD's probe is guarded instead
  by its pools' analytic loads). ``evaluate_layout``'s own rate uses
  the SLOs only and, on a short probe, can accept an overloaded rate (issue noted in
  docs/benchmarks/disaggregation.md).
- pd / afd: :mod:`moeplan.search.disagg.pools` — rate-matched pools, the best estimate's SLO-bound
  capacity simulated (:func:`moeplan.search.disagg.given.simulate_given`, what ``serve-sim --pd``
  runs).
  The two sides are measured differently (the colocated rate on this module's short probes,
  the disaggregated one in steady state with warm-up and drain excluded), so the ratios are
  indicative; ``moeplan plan`` ranks both families on the steady footing.

Rows for ``run()``: per (cluster, model, SLO) the PD and AFD capacity per GPU with the
colocated one as the reference (``ratio`` = family / colocated; 0 when the family cannot
serve). ``python bench/bench_disagg.py --table`` prints the markdown table of
docs/benchmarks/disaggregation.md, and ``--record`` also writes them to
docs/benchmarks/data/bench_disagg.json, the record that page is checked against. Runtime:
minutes on 2 shared cores (about 9 under a load of 15).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners.dep import brute_force, pppipe, solve
from moeplan.planners.dep.decode import decode_problem
from moeplan.search.colocated.evaluate import (
    analytic_rate,
    evaluate_layout,
    max_rate_meeting_slo,
    run_workload,
)
from moeplan.search.disagg.given import simulate_given
from moeplan.search.disagg.pools import (
    Context,
    candidates,
    queue_stable,
    serve_layouts,
    why_none,
)
from moeplan.serve import SLO, IterationModel, LengthDist, ServeWorkload
from moeplan.serve.knobs import engine_config
from moeplan.specs import load_cluster, load_model

MODELS = ("deepseek-v3", "qwen3-235b-a22b")
CLUSTERS = (
    ("h100-sxm-8", 2),
    ("h100-sxm-8", 4),
    ("h200-sxm-8", 2),
    ("h200-sxm-8", 4),
    ("mixserve-h20", 2),
)
SLOS = {
    "relaxed (TTFT 2 s, TPOT 100 ms)": SLO(ttft_s=2.0, tpot_s=0.1),
    "tight (TTFT 1 s, TPOT 40 ms)": SLO(ttft_s=1.0, tpot_s=0.04),
}
ISL, OSL = 2048, 256
REQUESTS, SEARCH = 300, 160
PROBE_MAX = 1500


def _workload() -> ServeWorkload:
    return ServeWorkload(
        num_requests=REQUESTS, rate=1.0, isl=LengthDist(mean=ISL), osl=LengthDist(mean=OSL), seed=0
    )


def _row(family: str, label: str, gpus: int, rate: float, m, bound: str) -> dict:
    return {
        "family": family,
        "label": label,
        "gpus": gpus,
        "rate": rate,
        "per_gpu": rate * OSL / gpus if gpus else 0.0,
        "ttft_p90_s": m.ttft_p90_s if m else float("nan"),
        "tpot_p90_s": m.tpot_p90_s if m else float("nan"),
        "bound": bound,
    }


class _Probe:
    def __init__(self, m, ok: bool) -> None:
        self.m, self.ok = m, ok

    def meets(self, slo: SLO) -> bool:
        return self.ok and self.m.meets(slo)


def stable_rate(cfg, ev, gpus: int, slo: SLO, hi: float) -> float:
    """Largest rate meeting the SLOs with a bounded queue (the PD probe's standard, so the
    families are compared alike: :func:`moeplan.search.disagg.pools.queue_stable`)."""
    # a probe shorter than a few batch caps never fills the engine, so it cannot show overload
    probe = replace(_workload(), num_requests=min(PROBE_MAX, max(SEARCH, 3 * cfg.max_running)))

    def run(rate: float) -> _Probe:
        res, m = run_workload(cfg, probe.with_rate(rate), ev, gpus, slo)
        return _Probe(m, queue_stable([res.admit_s - res.arrival_s], slo))

    return max_rate_meeting_slo(run, slo, hi=hi, max_steps=8)  # type: ignore[arg-type]


def colocated(model, cluster, cost, slo: SLO) -> dict:
    """Best colocated instance (module docstring)."""
    n = cluster.num_gpus
    scored = []
    for lay in serve_layouts(model, cluster, n):
        if lay.gpus not in (n, n // 2):
            continue
        try:
            cfg = engine_config("sglang", model, cluster, lay)
        except MoeplanError:
            continue
        est = analytic_rate(IterationModel(model, cluster, cost, lay), cfg, ISL, OSL, slo)
        scored.append((est.rate_rps / lay.gpus, lay))
    scored.sort(key=lambda s: -s[0])
    best = None
    for _, lay in scored[:2]:
        r = evaluate_layout(
            model, cluster, cost, lay, _workload(), slo, top_k=1, search_requests=SEARCH
        )
        if not r.feasible or r.engine is None:
            continue
        ev = IterationModel(model, cluster, cost, lay)
        hi = r.max_rate_meeting_slo_rps or (r.estimate.rate_rps if r.estimate else 1.0)
        rate = stable_rate(r.engine, ev, lay.gpus, slo, hi)
        if best is None or rate / lay.gpus > best[0] / best[1].layout.gpus:
            _, m = run_workload(r.engine, _workload().with_rate(rate or hi), ev, lay.gpus, slo)
            best = (rate, r, m)
    if best is None:
        return _row("colocated", "fits no layout", 0, 0.0, None, "weights do not fit")
    rate, r, m = best
    return _row("colocated", r.layout.label, r.layout.gpus, rate, m, r.bound)


def disaggregated(family: str, model, cluster, cost, slo: SLO) -> dict:
    ctx = Context(model=model, cluster=cluster, cost=cost, workload=_workload(), slo=slo)
    ks = candidates(ctx, family)
    if not ks:
        return _row(family, "—", 0, 0.0, None, why_none(ctx, family))
    r = simulate_given(ctx, ks[0].layout, rate_given=False, requests=SEARCH)
    rate = r.max_rate_meeting_slo_rps or 0.0
    return _row(family, ks[0].layout.label, ks[0].layout.gpus, rate, r.metrics, r.bound)


def scenarios():
    for cname, nodes in CLUSTERS:
        cluster = load_cluster(cname, nodes)
        cost = cost_model_for(cluster)
        for mname in MODELS:
            model = load_model(mname)
            for sname, slo in SLOS.items():
                rows = [colocated(model, cluster, cost, slo)]
                rows += [disaggregated(f, model, cluster, cost, slo) for f in ("pd", "afd")]
                yield f"{cluster.gpu.name} {nodes}x8", mname, sname, rows


ORACLE_CASES = (
    ("deepseek-v3", "h200-sxm-8", 2, 2, 10),
    ("qwen3-235b-a22b", "h100-sxm-8", 2, 4, 12),
)
ORACLE_SHAPES = ((1, 1024), (8, 2048), (32, 4096), (96, 2048))


def oracle_rows() -> list[dict]:
    """Algorithm 1 on decode shapes against brute force over (ma, r1, r2, order) and the
    best PPPipe (same problem, same run): the worst ratio over the grid, and solve time."""
    out = []
    for mname, cname, nodes, ag, eg in ORACLE_CASES:
        model, cluster = load_model(mname), load_cluster(cname, nodes)
        cost = cost_model_for(cluster)
        worst_bf, worst_pp, t_alg, t_bf = 1e9, 1e9, 0.0, 0.0
        for b, ctx in ORACLE_SHAPES:
            p = decode_problem(model, cluster, cost, ag=ag, eg=eg, batch=b, ctx=ctx)
            t0 = time.perf_counter()
            alg = solve(p)
            t1 = time.perf_counter()
            bf = brute_force(p)
            t_alg, t_bf = t_alg + t1 - t0, t_bf + time.perf_counter() - t1
            worst_bf = min(worst_bf, alg.throughput / bf.throughput)
            worst_pp = min(worst_pp, alg.throughput / pppipe(p).throughput)
        where = f"{mname}, {cluster.gpu.name} {nodes}x8, AG{ag}+EG{eg}"
        out.append(
            {
                "name": f"AFD decode: Algorithm 1 / brute force, worst of {len(ORACLE_SHAPES)} shapes, {where}",
                "value": worst_bf,
                "unit": "throughput ratio",
                "reference": 1.0,
                "ratio": worst_bf,
                "target": ">= 0.99",
                "note": f"solve {t_alg * 1e3:.1f} ms vs brute force {t_bf * 1e3:.0f} ms in all",
            }
        )
        out.append(
            {
                "name": f"AFD decode: Algorithm 1 / best PPPipe, worst shape, {where}",
                "value": worst_pp,
                "unit": "throughput ratio",
                "reference": 1.0,
                "ratio": worst_pp,
                "target": ">= 1",
                "note": "same problems",
            }
        )
    return out


def run() -> list[dict]:
    out = oracle_rows()
    for where, mname, sname, rows in scenarios():
        ref = rows[0]["per_gpu"]
        for r in rows[1:]:
            out.append(
                {
                    "name": f"{r['family']} vs colocated: {mname}, {where}, {sname}",
                    "value": r["per_gpu"],
                    "unit": "output tokens/s per GPU at the SLO rate",
                    "reference": ref,
                    "ratio": r["per_gpu"] / ref if ref else float("nan"),
                    "target": "informational (which family wins, and why)",
                    "note": f"{r['label']}; bound: {r['bound']}",
                }
            )
    return out


def table(rows_out: list[dict] | None = None) -> None:
    """Print the markdown table of docs/benchmarks/disaggregation.md; ``rows_out`` collects
    its rows (each family's row with its cluster, model and SLO)."""
    print(
        "| cluster | model | SLO | family | deployment | GPUs | max rate (req/s) | "
        "tok/s/GPU | TTFT p90 (ms) | TPOT p90 (ms) | bound |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for where, mname, sname, rows in scenarios():
        for r in rows:
            if rows_out is not None:
                rows_out.append({"cluster": where, "model": mname, "slo": sname, **r})
            print(
                f"| {where} | {mname} | {sname.split(' ')[0]} | {r['family']} | {r['label']} "
                f"| {r['gpus']} | {r['rate']:.2f} | {r['per_gpu']:.1f} | "
                f"{r['ttft_p90_s'] * 1e3:.0f} | {r['tpot_p90_s'] * 1e3:.1f} | {r['bound']} |",
                flush=True,
            )


if __name__ == "__main__":
    t0 = time.perf_counter()
    if "--table" in sys.argv or "--record" in sys.argv:
        rows: list[dict] = []
        table(rows)
        oracle = oracle_rows()
        for row in oracle:
            print(f"| {row['name']} | {row['value']:.4f} | {row['note']} |")
        if "--record" in sys.argv:
            # the record docs/benchmarks/disaggregation.md is checked against
            path = Path(__file__).resolve().parents[1] / "docs/benchmarks/data/bench_disagg.json"
            doc = {
                "command": "python bench/bench_disagg.py --record",
                "date": time.strftime("%Y-%m-%d", time.gmtime()),
                "kind": "bench",
                "load_average": round(os.getloadavg()[0], 2),
                "rows": rows,
                "oracle": oracle,
            }
            path.write_text(json.dumps(doc, indent=1) + "\n")
    else:
        for row in run():
            print(row)
    print(f"elapsed {time.perf_counter() - t0:.1f} s", file=sys.stderr)
