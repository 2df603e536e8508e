"""``moeplan serve-sim``'s printout of one simulated deployment (latency percentiles,
tokens/s per GPU and in all, goodput, the SLO verdict), of a P/D pair (the same, plus the
pools' line) and of one phase's steady step; the answers come from
:mod:`moeplan.commands.serve_sim`.
"""

from __future__ import annotations

from typing import Any

from moeplan.cli._common import Table, console, err_console, fmt_times, plural
from moeplan.commands.serve_sim import overload_line
from moeplan.kernel_tables import pricing_line
from moeplan.search.colocated.evaluate import ServeResult
from moeplan.search.disagg.pools import DisaggResult
from moeplan.search.job.outcome import (
    graphs_line,
    host_line,
    interval_line,
    release_label,
    sources_line,
)
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.iteration.phase import BREAKDOWN_KEYS
from moeplan.serve.pools.pd import PDLayout


def _ms(seconds: float) -> str:
    """Milliseconds to four significant digits (``0.5``, ``4.154``, ``2000``, ``12,346``)."""
    ms = seconds * 1e3
    return f"{ms:.4g}" if abs(ms) < 1e4 else f"{ms:,.0f}"


def print_human(out: dict[str, Any], r: ServeResult | DisaggResult) -> None:
    """The common printout of one simulated deployment (``out``: its JSON answer)."""
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
        f"({out['gpus']} GPUs){copies}, {e['name']}{release_label(out['pricing'])} scheduler "
        f"({e['policy']}, chunk {e['chunk_tokens']} tokens, cap {e['max_running']} requests), "
        f"{load}, {w['requests']} requests (simulated; times from the cost model)."
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
            f"{m['kv_capacity_tokens']:,} tokens pooled{_fraction(out)}, mean use "
            f"{100 * m['kv_utilisation']:.1f} %, peak {100 * m['kv_peak_utilisation']:.1f} %",
        ),
        ("preemptions (recomputed tokens)", f"{m['preemptions']} ({m['recomputed_tokens']:,})"),
    ]
    for k, v in rows:
        console.print(f"  {k}: [bold]{v}[/]")
    if m.get("overloaded"):
        console.print(overload_line(out))
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


def _fraction(out: dict[str, Any]) -> str:
    f = out["engine"].get("mem_fraction")
    return "" if f is None else f" at memory fraction {f:g}"


def print_single(out: dict[str, Any], r: ServeResult, knobs: InstanceKnobs) -> None:
    """One instance layout: :func:`print_human`, the MTP line, pricing and warnings."""
    print_human(out, r)
    if knobs.mtp:
        console.print(
            f"MTP: {knobs.mtp} draft token(s) per step, acceptance {knobs.mtp_accept:g} (given) "
            f"-> {knobs.tokens_per_step:.3g} tokens per decode step in expectation; ITL is "
            "the gap between steps, TPOT the time per output token"
        )
    console.print(pricing_line(out["pricing"]))
    console.print(sources_line(out["price_sources"], "the run"))
    graphs = graphs_line(out.get("cuda_graphs"))
    if graphs:
        console.print(graphs)
    host = host_line(out.get("host"))
    if host:
        console.print(host)
    console.print(interval_line(out["interval"]))
    if out["pricing"]["stand_in_note"]:
        console.print(out["pricing"]["stand_in_note"])
    for line in out["warnings"]:
        err_console.print(f"[yellow]warning:[/] {line}")


def print_pd(out: dict[str, Any], pd: PDLayout, r: DisaggResult) -> None:
    """A P/D pair as one engine (:func:`print_human`), then the pools in words (the
    scheduler printed above is the decode pool's) and the pricing."""
    print_human(out, r)
    console.print(
        f"Pools: {plural(pd.x, 'prefill instance')} of {pd.prefill.label}, "
        f"{plural(pd.y, 'decode instance')} "
        f"of {pd.decode.label} ({pd.gpus} GPUs; the scheduler above is the decode pool's); "
        f"analytic capacities {r.rho[0]:.2f} (prefill) and {r.rho[1]:.2f} (decode) of the "
        "pool that limits: 1.00 marks the bottleneck."
    )
    console.print(pricing_line(out["pricing"]))
    if out["price_sources"]:
        console.print(sources_line(out["price_sources"], "the pools' runs"))
        console.print(interval_line(out["interval"]))


def print_phase(out: dict[str, Any]) -> None:
    """One phase's steady step per GPU and its pricing."""
    knobs = ", ".join(f"{k}={v}" for k, v in out["knobs"].items() if v is not None)
    console.print(
        f"[bold]{out['model']}[/] on [bold]{out['cluster']}[/], {out['label']}, "
        f"{out['engine']}{release_label(out['pricing'])} ({knobs}): {out['phase']} step, "
        "steady state of the phase alone, per GPU."
    )
    if out["phase"] == "decode":
        what = f"{out['batch_per_gpu']} sequences at KV {out['context']}"
    else:
        what = f"{out['tokens_per_gpu']} prompt tokens in prompts of {out['context']}"
    console.print(
        f"  {what}: step [bold]{out['step_ms']:.2f} ms[/], "
        f"[bold]{out['tokens_per_s_per_gpu']:,.0f}[/] {out['tokens_kind']}/s per GPU"
    )
    bd = out["breakdown_ms"]
    parts = ", ".join(
        f"{k} {bd[k]:.2f}" for k in (*BREAKDOWN_KEYS, "overlap", "offload") if k in bd
    )
    console.print(f"  breakdown (ms, sums to the step): {parts}")
    if out.get("weight_offload"):
        wo = out["weight_offload"]
        console.print(
            f"  weight offload {wo['flags']} ({wo['chosen']}): {wo['why']}; {wo['price']}"
        )
    console.print(pricing_line(out["pricing"]))
    console.print(sources_line(out["price_sources"], "the step"))


def print_launch(launch: dict[str, Any] | None) -> None:
    """What moeplan read of ``--launch`` and did not price (each flag with why)."""
    if not launch:
        return
    console.print(f"Read from the {launch['engine']} launch command.")
    for item in launch["not_priced"]:
        console.print(f"[yellow]not priced[/]: {item['flag']} — {item['why']}")
    if launch["no_effect"]:
        names = ", ".join(i["flag"] for i in launch["no_effect"])
        console.print(f"no effect on these figures: {names}")
