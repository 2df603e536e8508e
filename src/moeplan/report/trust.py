"""Report sections on trust and inputs: the error of every price source, the quantized-kernel
note, the GEMM/NCCL fits, and the inputs as actually served (formatted from
:class:`moeplan.search.job.outcome.PlanOutcome`)."""

from __future__ import annotations

from typing import Any

from moeplan.report.html import Section
from moeplan.search.job.outcome import PlanOutcome, quant_sentence
from moeplan.units import GIB

#: What each kernel-price source is, in words (moeplan.cost.kerneldb.sources).
SOURCE_WORDS = {
    "measured": "the exact row of NVIDIA's measured table",
    "interpolated": "between measured rows of this GPU (held-out whole shapes)",
    "transferred": "learned on another GPU's table, scaled by this GPU's datasheet "
                   "(leave-one-GPU-out error)",
    "roofline": "datasheet peaks at fixed efficiencies (error against the tables)",
}  # fmt: skip


def _pct_range(r: tuple[float, float] | None) -> str:
    if r is None:
        return "not measured"
    lo, hi = r
    return f"{100 * lo:.1f}%" if abs(hi - lo) < 5e-4 else f"{100 * lo:.1f}–{100 * hi:.1f}%"


def error_section(outcome: PlanOutcome) -> Section:
    """Every kernel-price source with its share and held-out error; the GEMM/NCCL fits."""
    s = Section(title="How far to trust the prices")
    p = outcome.pricing
    if p.get("engine") is None:
        s.paragraphs.append(f"Kernel prices: {p.get('note', 'no engine tables')}.")
    else:
        s.paragraphs.append(f"Kernel prices: {p['note']}; {p['lookups']:,} kernel lookups.")
        rows = [[r["source"], f"{r['share']:.1%}", f"{r['lookups']:,}",
                 SOURCE_WORDS.get(r["source"], ""), ", ".join(r["ops"]),
                 _pct_range(r["error_median"]), _pct_range(r["error_p90"])]
                for r in outcome.price_sources]  # fmt: skip
        s.table(
            [
                "source",
                "share of lookups",
                "lookups",
                "what it is",
                "operations",
                "held-out median error",
                "held-out p90 error",
            ],
            rows,
        )
        s.paragraphs.append(_trust_sentence(outcome))
    q = quant_sentence(outcome.quant)
    if q:
        s.paragraphs.append(f"Note: {q}.")
    if p.get("stand_in_note"):
        s.paragraphs.append(str(p["stand_in_note"]))
    return s


def fits_section(outcome: PlanOutcome) -> Section | None:
    """The GEMM/NCCL model's fits (what prices GEMMs, projections and collectives outside the
    kernel tables) with their held-out errors."""
    fit = outcome.profile_fit
    if not fit:
        return None
    s = Section(
        title="GEMMs, projections and collectives outside the kernel tables",
        paragraphs=[fit["note"]],
    )
    s.table(["fit", "R²", "held-out median error", "held-out p90 error", "rows"],
            [[r["fit"], f"{r['r2']:.4f}", f"{100 * (r['heldout_median'] or 0):.1f}%",
              f"{100 * (r['heldout_p90'] or 0):.1f}%", r["rows"]]
             for r in fit["rows"]])  # fmt: skip
    return s


def _trust_sentence(outcome: PlanOutcome) -> str:
    """The source mix in one sentence: how much was transferred and how far to trust it."""
    p = outcome.pricing
    by = {r["source"]: r for r in outcome.price_sources}
    t = by.get("transferred")
    if p.get("transferred_gpu"):
        worst = _pct_range(t["error_p90"]) if t else "not measured"
        return (
            f"No measured tables exist for {p['gpu']}: {t['share'] if t else 0:.0%} of "
            f"kernel prices were transferred from the {p['reference_gpu']} tables. Trust "
            f"them to the leave-one-GPU-out error in the table (p90 {worst} per operation), not "
            "to the measured tables' accuracy."
        )
    if t is not None:
        return (
            f"{t['share']:.0%} of kernel prices were transferred (shapes outside "
            f"{p['tables_gpu']}'s measured range), p90 error {_pct_range(t['error_p90'])}; "
            "the rest come from this GPU's own tables."
        )
    return f"Every kernel price comes from {p['tables_gpu']}'s own measured tables."


def served_text(outcome: PlanOutcome) -> str:
    """The request stream every deployment was served and the SLOs, in words."""
    sw, r = outcome.served_workload, outcome.ranking
    slo = r.slo
    if sw["rate_rps"] is not None:
        load = f"Poisson arrivals at {sw['rate_rps']:g} requests/s"
    elif sw["concurrency"]:
        load = f"{sw['concurrency']} requests in flight (closed loop)"
    else:
        win = outcome.winner.result.max_rate_meeting_slo_rps
        at = f"; the winner's: {win:,.2f} requests/s" if win else ""
        load = f"Poisson arrivals at each deployment's SLO-bound capacity{at}"
    limits = ", ".join(x for x in (
        None if slo.ttft_s is None else f"TTFT ≤ {slo.ttft_s * 1e3:,.0f} ms",
        None if slo.tpot_s is None else f"TPOT ≤ {slo.tpot_s * 1e3:,.0f} ms") if x)  # fmt: skip
    return (
        f"requests of {sw['isl']} prompt + {sw['osl']} output tokens, {load}; "
        f"SLO p{slo.percentile:g}: {limits or 'none'}"
    )


def inputs_section(outcome: PlanOutcome) -> Section:
    m, c, w = outcome.model, outcome.cluster, outcome.analytic.workload
    sw = outcome.served_workload
    s = Section(title="Inputs")
    rows: list[list[Any]] = [
        ["model", f"{m.name} ({m.architecture}), {m.num_layers} layers, {m.num_experts} experts, "
                  f"top-{m.top_k}, {m.params_total / 1e9:.1f}B params"],
        ["cluster", f"{c.name}: {c.num_nodes}×{c.gpus_per_node} {c.gpu.name}, "
                    f"{c.gpu.mem_bytes / GIB:.0f} GiB, intra {c.intra.kind} "
                    f"{c.intra.bw / 1e9:.1f} GB/s, inter {c.inter.kind} {c.inter.bw / 1e9:.2f} GB/s"],
        ["cluster source", c.source],
        ["served workload", served_text(outcome)],
        ["measured requests", f"{sw['requests']:,} per capacity probe (warm-up and drain on "
                              f"top), seed {sw['seed']}, {sw['arrival']} arrivals"],
        ["analytic figures", f"one batch of {w.batch} prompts of {w.isl} tokens (+{w.osl} "
                             "output) for each family's own figure"],
        ["objective", outcome.ranking.objective],
        ["cost model", outcome.pricing.get("note") or "—"],
    ]  # fmt: skip
    if outcome.trace:
        rows.append(["routing trace", outcome.trace])
    s.table(["input", "value"], rows)
    return s
