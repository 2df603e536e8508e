"""``moeplan serve-sim``'s output: the JSON payload of one simulated deployment and its
printout (latency percentiles, tokens/s per GPU and in all, goodput, the SLO verdict).

The P/D path (:mod:`moeplan.cli.serve_pd`) renders through the same two functions, the
layout being the P/D pair.
"""

from __future__ import annotations

import math
from typing import Any

from moeplan.cli._common import Table, console, fmt_times
from moeplan.search.colocated.evaluate import ServeResult
from moeplan.serve import SLO, ServeWorkload


def _metrics_dict(r: ServeResult, rate: float | None) -> dict[str, Any]:
    m: dict[str, Any] = r.metrics.to_dict() if r.metrics is not None else {}
    m["max_rate_meeting_slo_rps"] = r.max_rate_meeting_slo_rps
    m["rate_simulated_rps"] = rate
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in m.items()}


def payload(
    model: str,
    cluster: str,
    r: ServeResult,
    w: ServeWorkload,
    slo: SLO,
    rate: float | None,
    engine: str,
) -> dict[str, Any]:
    e = r.engine
    assert e is not None
    return {
        "model": model,
        "cluster": cluster,
        "label": r.label,
        "gpus": r.layout.gpus,
        "layout": r.layout.to_dict(),
        "engine": {
            "name": engine,
            "policy": e.policy,
            "chunk_tokens": e.chunk_tokens,
            "max_running": e.max_running,
            "kv_tokens": e.kv_tokens,
            "kv_tokens_per_rank": e.kv_tokens_per_rank,
        },
        "workload": {
            "requests": w.num_requests,
            "rate_rps": rate,
            "concurrency": w.concurrency,
            "arrival": w.arrival,
            "cv": w.cv,
            "isl": w.isl.kind,
            "isl_mean": w.isl.mean,
            "isl_median": w.isl.median or None,  # lognormal only
            "osl": w.osl.kind,
            "osl_mean": w.osl.mean,
            "osl_median": w.osl.median or None,
            "prefix_hit": w.prefix_hit,
            "think_s": w.think_s,
            "seed": w.seed,
        },
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "percentile": slo.percentile},
        "meets_slo": r.meets_slo,
        "bound": r.bound,
        "metrics": _metrics_dict(r, rate),
    }


def _ms(seconds: float) -> str:
    """Milliseconds to four significant digits (``0.5``, ``4.154``, ``2000``, ``12,346``)."""
    ms = seconds * 1e3
    return f"{ms:.4g}" if abs(ms) < 1e4 else f"{ms:,.0f}"


def print_human(out: dict[str, Any], r: ServeResult) -> None:
    m, e, w = out["metrics"], out["engine"], out["workload"]
    load = (
        f"{w['rate_rps']:.3g} req/s Poisson"
        if w["rate_rps"]
        else f"{w['concurrency']} clients (closed loop, "
        + (f"{w['think_s'] * 1e3:g} ms mean think time)" if w["think_s"] else "no think time)")
    )
    n = out.get("replicas", 1)
    copies = f" x{n} replicas ({out['gpus'] * n} GPUs in all)" if n > 1 else ""
    console.print(
        f"[bold]{out['model']}[/] on [bold]{out['cluster']}[/], {out['label']} "
        f"({out['gpus']} GPUs){copies}, {e['name']} scheduler ({e['policy']}, chunk "
        f"{e['chunk_tokens']} tokens, cap {e['max_running']} requests), {load}, "
        f"{w['requests']} requests (simulated; times from the cost model)."
    )
    t = Table(title="Latency per request (simulated; one unit per row)")
    for col in ("metric", "p50", "p90", "p99"):
        t.add_column(col, justify="right" if col != "metric" else "left")
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2e")):
        unit, texts = fmt_times([m.get(f"{key}_p{p}_s") for p in (50, 90, 99)])
        t.add_row(f"{name} ({unit})", *texts)
    console.print(t)
    g = out["gpus"] * out.get("replicas", 1)  # the rate is all replicas'
    rows = [
        ("output tokens/s (total)", f"{m['output_tokens_per_s']:,.0f}"),
        ("output tokens/s per GPU", f"{m['output_tokens_per_s_per_gpu']:,.1f}"),
        ("prompt+output tokens/s per GPU", f"{m['total_tokens_per_s_per_gpu']:,.1f}"),
        (
            "goodput (requests/s meeting both SLOs)",
            f"{m['goodput_rps']:.3f} "
            f"({m['goodput_rps_per_gpu']:.4f} per GPU, {100 * m['slo_attainment']:.1f} % of requests)",
        ),
        (
            "largest Poisson rate meeting the SLOs",
            "—"
            if m["max_rate_meeting_slo_rps"] is None
            else f"{m['max_rate_meeting_slo_rps']:.3g} req/s ({m['max_rate_meeting_slo_rps'] / g:.3g} per GPU)",
        ),
        (
            "KV cache",
            f"{m['kv_capacity_tokens']:,} tokens pooled, mean use "
            f"{100 * m['kv_utilisation']:.1f} %, peak {100 * m['kv_peak_utilisation']:.1f} %",
        ),
        ("preemptions (recomputed tokens)", f"{m['preemptions']} ({m['recomputed_tokens']:,})"),
    ]
    for k, v in rows:
        console.print(f"  {k}: [bold]{v}[/]")
    slo = out["slo"]
    p = int(slo["percentile"])
    verdict = "[green]meets[/]" if r.meets_slo else "[red]misses[/]"
    console.print(
        f"SLOs at p{p}: TTFT {_ms(m[f'ttft_p{p}_s'])} / {_ms(slo['ttft_s'])} ms, "
        f"TPOT {_ms(m[f'tpot_p{p}_s'])} / {_ms(slo['tpot_s'])} ms: {verdict}. "
        f"Bound at the operating point: {r.bound}."
    )
    if "trace" in out:
        console.print(f"Chrome trace: {out['trace']}")
