"""The sections of the ``moeplan plan`` report (report.html), one function per section.

Every section formats a field of :class:`moeplan.search.job.outcome.PlanOutcome`; nothing here plans
or simulates. Every number says what it is, one unit per column. The analytic table and the
MixServe chart show the same quantity for the same plan: prompt tokens/s per GPU for the
planned batch and the batch's prefill time without queueing (the families' own footing,
:mod:`moeplan.planners.rank`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from moeplan.planners.families import FAMILY
from moeplan.report import figures
from moeplan.report.html import Section, render
from moeplan.report.trust import error_section, fits_section, inputs_section, served_text
from moeplan.search.job.outcome import PlanOutcome
from moeplan.units import GIB, MIB

if TYPE_CHECKING:
    from moeplan.planners.rank import Candidate


def render_report(outcome: PlanOutcome, launchers: list[Any] | None = None) -> str:
    """The whole report page; ``launchers``: the launch files written beside it
    (:class:`moeplan.report.plan_report.LaunchFile`)."""
    m, c = outcome.model, outcome.cluster
    sections = [_serving_section(outcome), _serving_figures(outcome), _verdict(outcome)]
    by_family = {x.family: x for x in outcome.analytic.candidates}
    for name, section in FAMILY_SECTIONS.items():
        sec = section(outcome, by_family[name]) if name in by_family else None
        if sec is not None:
            sections.append(sec)
    if outcome.placement_changes:
        sections.append(_placement_section(outcome))
    if launchers:
        sections.append(_launch_section(launchers))
    sections.append(error_section(outcome))
    fits = fits_section(outcome)
    if fits is not None:
        sections.append(fits)
    sections.append(inputs_section(outcome))
    return render(
        f"moeplan: {m.name} on {c.name}",
        f"{c.num_gpus} × {c.gpu.name}; {served_text(outcome)}",
        sections,
    )


def _serving_section(outcome: PlanOutcome) -> Section:
    """The serving ranking (continuous batching under the SLOs), which picks the winner."""
    ranking, names = outcome.ranking, outcome.family_names
    s = Section(
        title="Verdict under load (serving simulation)",
        paragraphs=[*outcome.explanation, outcome.limits],
    )
    s.paragraphs += _placement_lines(outcome)
    pct = f"p{ranking.slo.percentile:g}"
    rows = []
    for i, x in enumerate(ranking.ranked, 1):
        mt = x.metrics
        if mt is None:
            cells = ["—"] * 4
        else:
            ttft, tpot = mt.at_percentile(ranking.slo.percentile)
            rate = x.result.max_rate_meeting_slo_rps
            cells = [
                f"{mt.output_tokens_per_s_per_gpu:,.1f}",
                f"{ttft * 1e3:,.0f}",
                f"{tpot * 1e3:,.1f}",
                "—" if rate is None else f"{rate:,.2f}",
            ]
        rows.append([i, names.get(x.entry.family, x.entry.family), x.entry.layout_label,
                     x.entry.gpus, "yes" if x.result.meets_slo else "no", *cells,
                     x.result.bound])  # fmt: skip
    s.table(["#", "family", "layout", "GPUs", "meets SLOs", "output tokens/s per GPU",
             f"TTFT {pct} (ms)", f"TPOT {pct} (ms)", "max rate meeting SLOs (req/s)",
             "limited by"], rows, highlight=0)  # fmt: skip
    both = outcome.side_by_side
    if both is not None:
        keys = (both["aggregated"], both["disaggregated"])
        s.table(["", "deployment", "GPUs", "max rate meeting SLOs (req/s)",
                 "output tokens/s per GPU", "tokens/s per user", f"TTFT {pct} (ms)",
                 f"TPOT {pct} (ms)", "limited by"],
                [[kind, r["deployment"], r["gpus"], f"{r['max_rate_meeting_slo_rps'] or 0:,.2f}",
                  f"{r['output_tokens_per_s_per_gpu']:,.1f}", f"{r['tokens_per_s_per_user']:,.1f}",
                  f"{r[f'ttft_{pct}_s'] * 1e3:,.0f}", f"{r[f'tpot_{pct}_s'] * 1e3:,.1f}",
                  r["limited_by"]] for kind, r in zip(("aggregated", "disaggregated"), keys,
                                                      strict=True)],
                highlight=0 if both["winner"] == "aggregated" else 1)  # fmt: skip
    return s


def _placement_lines(outcome: PlanOutcome) -> list[str]:
    """One sentence on Sem-MoE when its section is not shown (it does not change the answer)."""
    p = outcome.placement
    if outcome.placement_changes:
        return []
    if p is None:
        return [outcome.placement_note] if outcome.placement_note else []
    sem, base = p.methods["semmoe"].metrics, p.methods["contiguous"].metrics
    gain = 1 - sem["moe_layer_time_s"] / base["moe_layer_time_s"]
    if outcome.trace is None:
        why = (
            "no routing trace was given, so it ran on a synthetic trace and nothing is "
            "exported; pass --trace to place the experts for real"
        )
    elif p.fallback:
        why = "the validation split found it no better than contiguous placement"
    else:
        why = "its gain is within the layer model's noise"
    how = f"{gain:.1%} faster" if gain >= 0 else f"{-gain:.1%} slower"
    return [
        f"Expert placement (Sem-MoE on EP{p.ep}) does not change this plan: {why} "
        f"(its held-out MoE layer time: {how} than contiguous placement)."
    ]


def _serving_figures(outcome: PlanOutcome) -> Section:
    """Pareto front, latency distributions and latency against load of the top plans."""
    from moeplan.report import serving as fig

    ranking, curves = outcome.ranking, outcome.curves
    s = Section(
        title="Under load: throughput, latency distributions, latency against rate",
        paragraphs=[
            "Every deployment the search kept, simulated with continuous batching in "
            "steady state at a sweep of loads (a tenth of its largest rate meeting the SLOs "
            "up to that rate): output tokens/s per GPU against tokens/s per user, the "
            "non-dominated points joined and labelled as the Pareto front, the others "
            "faint; the per-request TTFT and TPOT of the top plans at their operating "
            "point; and their latency percentiles on the same steady runs, up to 1.25x the "
            "largest rate meeting the SLOs (the point at that rate is the verdict's own "
            "run). SLO limits are the dashed red lines.",
        ],
        figures=[
            fig.serving_pareto(ranking, curves),
            fig.latency_distributions(curves, ranking.slo),
        ],
    )
    if curves.get("rate"):
        s.figures.append(fig.latency_rate(curves, ranking.slo))
    return s


def _verdict(outcome: PlanOutcome) -> Section:
    result, names = outcome.analytic, outcome.family_names
    s = Section(title="Each family's own figure (batch prefill, analytic)",
                paragraphs=[*result.explanation, "This ranks each family's own analytic figure "
                            "(prefill of one batch), a different quantity from the serving "
                            "verdict above; it is shown for reference."])  # fmt: skip
    m = result.model
    if m.num_layers < outcome.full_layers:
        s.paragraphs.insert(0, f"Planned on the first {m.num_layers} of {outcome.full_layers} "
                            "decoder layers (--layers); the launch scripts load the full model, "
                            "whose memory and speed differ from these numbers.")  # fmt: skip
    s.table(["#", "family", "plan", "GPUs", "prompt tokens/s per GPU (batch prefill)",
             "TTFT (ms, batch prefill, no queueing)", "ITL (ms)", "memory per GPU (GiB)",
             "bound"],
            [[i, names.get(x.family, x.family), x.label, x.gpus, f"{x.per_gpu:,.0f}",
              f"{x.ttft_s * 1e3:,.1f}", f"{x.itl_s * 1e3:.2f}" if x.itl_s else "—",
              f"{x.mem_bytes_per_gpu / GIB:.1f}", x.bound]
             for i, x in enumerate(result.candidates, 1)], highlight=0)  # fmt: skip
    for fam, why in result.skipped.items():
        s.paragraphs.append(f"{names.get(fam, fam)} was not planned: {why}")
    s.figures.append(figures.families_bar(result))
    return s


def _dep_section(outcome: PlanOutcome, d: Candidate) -> Section | None:
    if not outcome.dep_schedules:
        return None
    return Section(
        title=FAMILY[d.family].report_section,
        paragraphs=[f"FinDEP {d.label}: {d.extra['speedup_vs_pppipe']:.2f}x PPPipe and "
                    f"{d.extra['speedup_vs_naive']:.2f}x naive DEP on the same simulator."],
        figures=[figures.dep_gantt(outcome.dep_schedules)],
    )  # fmt: skip


def _pipeline_section(outcome: PlanOutcome, p: Candidate) -> Section:
    return Section(
        title=FAMILY[p.family].report_section,
        figures=[figures.pipeline_stages(p, outcome.cluster.gpu.mem_bytes)],
    )


def _pareto_section(outcome: PlanOutcome, s: Candidate) -> Section:
    a = s.detail
    return Section(
        title=FAMILY[s.family].report_section,
        paragraphs=[
            f"{len(a.strategies)} strategies fit memory; {a.rejected_memory} were "
            f"rejected for memory and {a.rejected_shape} for shape.",
            "Axes are two of the analytic table's columns: prompt tokens/s per GPU for "
            f"the batch of {outcome.analytic.workload.batch} prompts (its prefill, no "
            "queueing) and the decode ITL, so the table's MixServe row is the starred point. "
            "MixServe's own ranking figures (end-to-end output tokens/s with decode, "
            "and TTFT with queueing) are different quantities; they are in each point's "
            "hover text.",
        ],
        figures=[figures.pareto(s, outcome.analytic.workload)],
    )


def _placement_section(outcome: PlanOutcome) -> Section:
    """Sem-MoE's placement, shown when it is exported and beats contiguous placement."""
    p = outcome.placement
    assert p is not None  # the section is drawn only for a placement
    sem = p.methods["semmoe"].metrics
    text = (
        f"Trace: {outcome.trace}. Sem-MoE keeps {100 * sem['lar']:.1f}% of expert "
        "activations on the token's own GPU; expert_location.json carries its placement."
    )
    if outcome.winner_ep != p.ep:
        text += f" The winner runs EP{outcome.winner_ep}; this placement was made on EP{p.ep}."
    guard = p.extra.get("guard")
    if guard is not None and not guard["resolved"]:
        text += (
            f" The validation split ({guard['requests']} requests) cannot resolve Sem-MoE "
            "from contiguous placement; the placement fitted on the larger split is kept."
        )
    s = Section(
        title=f"Expert placement (Sem-MoE) on EP{p.ep}",
        paragraphs=[text],
        figures=figures.placement_figures(p),
    )
    s.table(["method", "LAR", "imbalance (max/mean)", "all-to-all per layer (MiB)",
             "MoE layer (ms)"],
            [[k, f"{v.metrics['lar']:.3f}", f"{v.metrics['imbalance']:.3f}",
              f"{v.metrics['a2a_bytes_per_layer'] / MIB:,.1f}",
              f"{v.metrics['moe_layer_time_s'] * 1e3:.3f}"]
             for k, v in p.methods.items()])  # fmt: skip
    return s


def _launch_section(launchers: list[Any]) -> Section:
    """The launch files written beside the report, each with what it starts."""
    s = Section(title="Launch scripts",
                paragraphs=["The files written beside this report, as written; each says at "
                            "its top what it starts and what it cannot."])  # fmt: skip
    rows = []
    for lf in launchers:
        rows.append([lf.name, lf.launches, lf.predicted, lf.gap])
        s.paragraphs += [f"{lf.name}: {n}" for n in lf.notes]
    s.table(["file", "launches", "predicted", "winner ÷ launched (per GPU)"], rows)
    return s


#: The report's section of each proposed family, keyed by family name, in page order
#: (:data:`moeplan.planners.families.PROPOSING_FAMILIES`; None: nothing to show this time).
FAMILY_SECTIONS: dict[str, Callable[[PlanOutcome, Candidate], Section | None]] = {
    "dep": _dep_section,
    "pipeline": _pipeline_section,
    "strategy": _pareto_section,
}
