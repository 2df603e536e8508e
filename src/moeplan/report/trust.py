"""Report sections on trust and inputs: each price source's share of the winner's priced
seconds with its held-out error and why it is not measured, the winner's run outside the
engine's CUDA graphs (:mod:`moeplan.serve.cuda_graphs`), the quantized-kernel note, the
GEMM/NCCL fits, and the inputs as actually served (formatted from
:class:`moeplan.search.job.outcome.PlanOutcome`)."""

from __future__ import annotations

from typing import Any

from moeplan.report.html import Section
from moeplan.search.job.outcome import PlanOutcome, graphs_line, quant_sentence
from moeplan.units import GIB

#: What each kernel-price source is, in words (moeplan.cost.kerneldb.sources).
SOURCE_WORDS = {
    "measured": "the exact row of NVIDIA's measured table",
    "interpolated": "between measured rows of this GPU (held-out whole shapes)",
    "transferred": "a model learned on measured rows where none is near: another GPU's "
                   "table scaled by this GPU's datasheet (leave-one-GPU-out error), a shape "
                   "past the table's end, DeepEP across nodes",
    "roofline": "datasheet peaks at fixed efficiencies, the GEMM/NCCL model, or the "
                "datasheet floor a price was raised to",
}  # fmt: skip


def error_section(outcome: PlanOutcome) -> Section:
    """Every price source with its share of the winner's priced seconds, held-out error and
    why it is not measured; the kernel lookups behind it; the GEMM/NCCL fits."""
    s = Section(title="How far to trust the prices")
    p = outcome.pricing
    if p.get("engine") is None:
        s.paragraphs.append(f"Kernel prices: {p.get('note', 'no engine tables')}.")
    else:
        s.paragraphs.append(f"Kernel prices: {p['note']}; {p['lookups']:,} kernel lookups.")
    ps = outcome.price_sources
    if ps:
        looked = {r["source"]: r for r in outcome.lookup_sources}
        rows = [[src, f"{r['share']:.1%}", f"{r['seconds']:,.3f}", SOURCE_WORDS[src],
                 _pct(r["heldout_error"]), r["reason"] or "—",
                 ", ".join(looked[src]["ops"]) if src in looked else "—",
                 f"{looked[src]['lookups']:,}" if src in looked else "0"]
                for src, r in ps.items() if r["seconds"] > 0.0]  # fmt: skip
        s.table(
            [
                "source",
                "share of priced seconds",
                "seconds",
                "what it is",
                "held-out error",
                "why not measured",
                "kernel operations",
                "kernel lookups",
            ],
            rows,
        )
        s.paragraphs.append(_trust_sentence(outcome))
    graphs = graphs_line(outcome.cuda_graphs)
    if graphs:
        s.paragraphs.append(f"The winner's run: {graphs}.")
    q = quant_sentence(outcome.quant)
    if q:
        s.paragraphs.append(f"Note: {q}.")
    if p.get("stand_in_note"):
        s.paragraphs.append(str(p["stand_in_note"]))
    return s


def _pct(e: float | None) -> str:
    return "not measured" if e is None else f"{100 * e:.1f}%"


def _covers(r: dict[str, Any]) -> str:
    """Where a source's held-out error leaves some of its seconds out: how many it covers."""
    c = r.get("heldout_covers")
    if r["heldout_error"] is None or c is None or c >= 0.995:
        return ""
    return f" over the {c:.0%} of its seconds that have a held-out figure"


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
    """The source mix in one sentence: the share of the winner's priced seconds not read from
    a measured row, and why (each price's own cause, :mod:`moeplan.cost.price_keys`)."""
    ps = outcome.price_sources
    measured = ps["measured"]["share"]
    rest = sorted(
        ((src, r) for src, r in ps.items() if src != "measured" and r["seconds"] > 0.0),
        key=lambda x: -x[1]["share"],
    )
    if not rest:
        return "Every priced second of the winner's run comes from a measured table row."
    parts = "; ".join(
        f"{r['share']:.0%} {src} (held-out error {_pct(r['heldout_error'])}"
        f"{_covers(r)}: {r['reason']})"
        for src, r in rest
    )
    return f"{measured:.0%} of the winner's priced seconds come from measured table rows; {parts}."


def served_text(outcome: PlanOutcome) -> str:
    """The request stream every deployment was served and the SLOs, in words."""
    sw, r = outcome.served_workload, outcome.ranking
    slo = r.slo
    if sw["rate_rps"] is not None:
        load = f"Poisson arrivals at {sw['rate_rps']:g} requests/s"
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
        ["cluster", f"{c.name}: {c.num_nodes}×{c.gpus_per_node} {c.gpu.name}"
                    f"{f' (NVLink domains of {c.nvlink_domain})' if c.mnnvl else ''}, "
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
