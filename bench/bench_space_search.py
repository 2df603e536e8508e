"""The deployment-space search: steadiness of its winner, its certificate, and its speed.

For each case: the colocated space searched by SLO-bound capacity
(:func:`moeplan.search.colocated.search.search_space`, the engine's measured-kernel cost model as
``moeplan plan`` uses it) at each ``--requests`` count and arrival seed (``--seeds``, default
0: plan's). Prints one JSON line per
(case, requests): winner, capacity per GPU with its 95 % interval, the certificate, every
simulated layout's bound vs capacity (the bound must never be below), wall and CPU seconds.

Run: ``python bench/bench_space_search.py [--requests 500 5000] [--cases qwen8 dsv3-2x8 qwen16n]
[--seeds 0 1 ...] [--exhaustive]`` (``--exhaustive``: every layout simulated — the search's oracle).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from moeplan.kernel_tables import engine_cost_model
from moeplan.search.colocated.search import SpaceCandidate, prepare, search_capacity, search_space
from moeplan.search.colocated.space import copies, layouts
from moeplan.search.job.memo_cost import MemoCost
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.serve.iteration.instance_knobs import resolve_knobs
from moeplan.specs import load_cluster, load_model

CASES = {  # the questions of the search's design notes (model, cluster, nodes, isl, osl, SLOs)
    "qwen8": ("qwen3-30b-a3b", "h100-sxm-8", 1, 1024, 256, 2.0, 0.05),
    "dsv3-2x8": ("deepseek-v3", "h200-sxm-8", 2, 4096, 1024, 3.0, 0.1),
    "qwen16n": ("qwen3-30b-a3b", "h100-sxm-8", 16, 1024, 256, 2.0, 0.05),
}


def run(case: str, requests: int, seed: int = 0) -> dict:
    model, cluster, nodes, isl, osl, ttft, tpot = CASES[case]
    m = load_model(model)
    c = load_cluster(cluster)
    c = c.with_nodes(nodes) if nodes != c.num_nodes else c
    cm = engine_cost_model(c, None, engine="sglang")
    wl = ServeWorkload(
        num_requests=requests,
        rate=1.0,
        isl=LengthDist(mean=isl),
        osl=LengthDist(mean=osl),
        seed=seed,
    )
    slo = SLO(ttft_s=ttft, tpot_s=tpot)
    t0, c0 = time.perf_counter(), time.process_time()
    ranked, cert = search_space(
        m,
        c,
        cm,
        wl,
        slo,
        requests=requests,
        knobs_for=lambda lay: [resolve_knobs(cm.engine, m, c, lay)],  # plan's default knobs
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    w = ranked[0]
    cap = w.capacity
    sims = [
        {
            "layout": s.layout.label,
            "replicas": s.replicas,
            "capacity": s.capacity_per_gpu(osl),
            "bound": s.bound_per_gpu(osl),
        }
        for s in ranked
        if s.capacity is not None
    ]
    return {
        "case": case,
        "requests": requests,
        "seed": seed,
        "wall_s": wall,
        "cpu_s": cpu,
        "winner": w.layout.label,
        "replicas": w.replicas,
        "spare_gpus": w.spare_gpus,
        "capacity_tokens_per_s_per_gpu": w.capacity_per_gpu(osl),
        "ci95_half_width_rel": None if cap is None else cap.ci_rel,
        "limited_by": None if cap is None else cap.limited_by,
        "certificate": cert.to_dict(),
        "bound_never_below": all(s["bound"] >= s["capacity"] for s in sims),
        "simulated": sims,
    }


def exhaustive(case: str, requests: int, seed: int = 0) -> dict:
    """Every layout's capacity simulated (the oracle of the search): the best, and whether
    each bound is at least its layout's simulated capacity."""
    model, cluster, nodes, isl, osl, ttft, tpot = CASES[case]
    m = load_model(model)
    c = load_cluster(cluster)
    c = c.with_nodes(nodes) if nodes != c.num_nodes else c
    cm = MemoCost(engine_cost_model(c, None, engine="sglang"))
    wl = ServeWorkload(
        num_requests=requests,
        rate=1.0,
        isl=LengthDist(mean=isl),
        osl=LengthDist(mean=osl),
        seed=seed,
    )
    slo = SLO(ttft_s=ttft, tpot_s=tpot)
    t0, c0 = time.perf_counter(), time.process_time()
    rows = []
    for lay in layouts(m, c):
        k, spare = copies(c, lay)
        s = SpaceCandidate(
            layout=lay, replicas=k, spare_gpus=spare, knobs=resolve_knobs(cm.engine, m, c, lay)
        )
        prepare(s, m, c, cm, wl, slo, "sglang")  # type: ignore[arg-type]
        if s.bound is None:
            continue
        search_capacity(s, wl, slo, requests)
        rows.append(
            {
                "layout": lay.label,
                "replicas": k,
                "capacity": s.capacity_per_gpu(osl),
                "bound": s.bound_per_gpu(osl),
            }
        )
    rows.sort(key=lambda r: -r["capacity"])
    return {
        "case": case,
        "requests": requests,
        "seed": seed,
        "mode": "exhaustive",
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "best": rows[0] if rows else None,
        "bound_never_below": all(r["bound"] >= r["capacity"] for r in rows),
        "violations": [r for r in rows if r["bound"] < r["capacity"]],
        "top5": rows[:5],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, nargs="+", default=[500, 5000])
    ap.add_argument("--cases", nargs="+", default=["qwen8"], choices=sorted(CASES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="arrival-stream seeds")
    ap.add_argument(
        "--exhaustive",
        action="store_true",
        help="simulate every layout's capacity instead of searching",
    )
    ap.add_argument(
        "--record",
        action="store_true",
        help="also add each row to docs/benchmarks/data/bench_space_search.json (the record "
        "docs/BENCHMARKS.md's search table is checked against)",
    )
    args = ap.parse_args()
    for case in args.cases:
        for n in args.requests:
            for seed in args.seeds:
                f = exhaustive if args.exhaustive else run
                row = f(case, n, seed)
                print(json.dumps(row), flush=True)
                if args.record:
                    record(row, exhaustive=args.exhaustive)


def record(row: dict, exhaustive: bool) -> None:
    """Add ``row`` to docs/benchmarks/data/bench_space_search.json, replacing the row of the
    same case, request count, seed and mode, with the date and the load average of this run."""
    path = Path(__file__).resolve().parents[1] / "docs/benchmarks/data/bench_space_search.json"
    rows = json.loads(path.read_text())["rows"] if path.exists() else []
    key = (row["case"], row["requests"], row["seed"], exhaustive)
    rows = [
        r
        for r in rows
        if (r["case"], r["requests"], r.get("seed", 0), r.get("exhaustive", False)) != key
    ]
    doc = {
        "command": "python bench/bench_space_search.py --requests N --cases CASE [--seeds S] "
        "[--exhaustive] --record (each row's case, requests and seed)",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "kind": "bench",
        "load_average": round(os.getloadavg()[0], 2),
        "rows": [*rows, {**row, "exhaustive": exhaustive}],
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
