"""The sections of the ``moeplan plan`` report (report.html), one function per section.

Every number in a section says what it is. The verdict table and the MixServe chart show the
same quantity for the same plan: prompt tokens/s per GPU for the planned batch and the batch's
prefill time without queueing (the ranking's common footing, :mod:`moeplan.planners.rank`);
MixServe's own end-to-end figures (decode included, queueing TTFT) are in the chart's hover
text and named as such.
"""

from __future__ import annotations

from typing import Any

from moeplan.planners.rank import PlanResult
from moeplan.report import figures
from moeplan.report.html import Section, render
from moeplan.units import GIB


def render_report(
    result: PlanResult,
    placement: Any,
    cm: Any,
    trace: str | None,
    exports: dict[str, Any] | None = None,
    full_layers: int | None = None,
    serving: Any = None,
) -> str:
    """The whole report page."""
    m, c, w = result.model, result.cluster, result.workload
    sections = [_verdict(result, full_layers, serving is not None)]
    if serving is not None:
        sections.insert(0, _serving_section(result, serving))
        sections.insert(1, _serving_figures(result, serving, cm))
    by_family = {x.family: x for x in result.candidates}
    if "dep" in by_family:
        d = by_family["dep"]
        sections.append(
            Section(
                title="Disaggregated (FinDEP): schedule",
                paragraphs=[
                    f"FinDEP {d.label}: {d.extra['speedup_vs_pppipe']:.2f}x PPPipe and "
                    f"{d.extra['speedup_vs_naive']:.2f}x naive DEP on the same simulator."
                ],
                figures=[figures.dep_gantt(d)],
            )
        )
    if "pipeline" in by_family:
        sections.append(
            Section(
                title="Pipelined (SMIDT): stages",
                figures=[figures.pipeline_stages(by_family["pipeline"], c.gpu.mem_bytes)],
            )
        )
    if "strategy" in by_family:
        sections.append(_pareto_section(result, by_family["strategy"]))
    if placement is not None:
        sections.append(_placement_section(result, placement, trace, serving))
    if exports:
        sections.append(_launch_section(exports))
    sections.append(_error_section(cm))
    sections.append(_inputs_section(m, c, w, cm))
    return render(
        f"moeplan: {m.name} on {c.name}",
        f"{c.num_gpus} × {c.gpu.name}, {w.batch} prompts × {w.isl} tokens (+{w.osl} out)",
        sections,
    )


def _verdict(result: PlanResult, full_layers: int | None, served: bool) -> Section:
    title = "Each family's own figure (batch prefill, analytic)" if served else "Verdict"
    s = Section(title=title, paragraphs=list(result.explanation))
    m = result.model
    if full_layers is not None and m.num_layers < full_layers:
        s.paragraphs.insert(
            0,
            f"Planned on the first {m.num_layers} of {full_layers} decoder "
            "layers (--layers); the launch scripts load the full model, whose "
            "memory and speed differ from these numbers.",
        )
    s.table(
        [
            "#",
            "family",
            "plan",
            "GPUs",
            "prompt tokens/s/GPU (batch prefill)",
            "TTFT (ms, batch prefill, no queueing)",
            "ITL (ms)",
            "memory/GPU (GiB)",
            "bound",
        ],
        [
            [
                i,
                figures.FAMILY_NAMES[x.family],
                x.label,
                x.gpus,
                f"{x.per_gpu:,.0f}",
                f"{x.ttft_s * 1e3:.1f}",
                f"{x.itl_s * 1e3:.2f}" if x.itl_s else "—",
                f"{x.mem_bytes_per_gpu / GIB:.1f}",
                x.bound,
            ]
            for i, x in enumerate(result.candidates, 1)
        ],
        highlight=0,
    )
    for fam, why in result.skipped.items():
        s.paragraphs.append(f"{figures.FAMILY_NAMES[fam]} was not planned: {why}")
    s.figures.append(figures.families_bar(result))
    return s


def _serving_section(result: PlanResult, serving: Any) -> Section:
    """The serving ranking (continuous batching under the SLOs), which picks the winner."""
    from moeplan.serve.rank import serve_explanation

    s = Section(
        title="Verdict under load (serving simulation)",
        paragraphs=serve_explanation(serving, result),
    )
    rows = []
    for i, x in enumerate(serving.ranked, 1):
        m = x.metrics
        cells = (
            ["—"] * 4
            if m is None
            else [
                f"{m.output_tokens_per_s_per_gpu:,.1f}",
                f"{m.ttft_p90_s * 1e3:.0f}",
                f"{m.tpot_p90_s * 1e3:.1f}",
                f"{x.result.max_rate_meeting_slo_rps or 0:.2f}",
            ]
        )
        rows.append(
            [
                i,
                figures.FAMILY_NAMES[x.entry.family],
                x.entry.layout_label,
                x.entry.gpus,
                "yes" if x.result.meets_slo else "no",
                *cells,
            ]
        )
    s.table(
        [
            "#",
            "family",
            "layout",
            "GPUs",
            "meets SLOs",
            "output tokens/s/GPU (simulated)",
            "TTFT p90 (ms)",
            "TPOT p90 (ms)",
            "max rate meeting SLOs (req/s)",
        ],
        rows,
        highlight=0,
    )
    s.paragraphs.append(
        "The next section ranks each family's own analytic figure (prefill "
        "of one batch), a different quantity; it is shown for reference."
    )
    return s


def _serving_figures(result: PlanResult, serving: Any, cm: Any) -> Section:
    """Pareto front, latency distributions and latency against load of the top plans."""
    from moeplan.report import serving as fig
    from moeplan.serve.rank import serving_curves

    curves = serving_curves(serving, result.model, result.cluster, cm)
    s = Section(
        title="Under load: throughput, latency distributions, latency against rate",
        paragraphs=[
            "Every deployment simulated with continuous batching: output tokens/s per GPU "
            "against tokens/s per user; the per-request TTFT and TPOT of the top plans at "
            "their operating point; and their p90 latencies as the Poisson arrival rate "
            "grows from a quarter to 1.25x the largest rate meeting the SLOs.",
        ],
        figures=[fig.serving_pareto(serving), fig.latency_distributions(curves, serving.slo)],
    )
    if curves["rate"]:
        s.figures.append(fig.latency_rate(curves, serving.slo))
    return s


def _pareto_section(result: PlanResult, s: Any) -> Section:
    a = s.detail
    return Section(
        title="Colocated hybrid (MixServe): strategies",
        paragraphs=[
            f"{len(a.strategies)} strategies fit memory; {a.rejected_memory} were "
            f"rejected for memory and {a.rejected_shape} for shape.",
            "Axes are two of the verdict table's columns: prompt tokens/s per GPU for "
            f"the batch of {result.workload.batch} prompts (its prefill, no queueing) "
            "and the decode ITL, so the table's MixServe row is the starred point. "
            "MixServe's own ranking figures (end-to-end output tokens/s with decode, "
            "and TTFT with queueing) are different quantities; they are in each point's "
            "hover text.",
        ],
        figures=[figures.pareto(s, result.workload)],
    )


def _placement_section(
    result: PlanResult, placement: Any, trace: str | None, serving: Any = None
) -> Section:
    sem_res = placement.methods["semmoe"]
    sem = sem_res.metrics
    if trace:
        src = f"Trace: {trace}."
    else:
        src = (
            f"No trace was given: a synthetic trace with the model's shape, first "
            f"{sem_res.y.shape[0]} MoE layers (no expert_location.json is exported from it)."
        )
    ep_note = _ep_note(winner_ep(result, serving), placement.ep)
    text = (
        f"{src}{ep_note} Sem-MoE keeps {100 * sem['lar']:.1f}% of expert activations on the "
        "token's own GPU."
    )
    guard = placement.extra.get("guard")
    if placement.fallback:
        text += (
            " On the validation split Sem-MoE was resolved worse than contiguous placement "
            f"({guard['decision'] if guard else 'guard'}), so contiguous placement is kept."
        )
    elif guard is not None and not guard["resolved"]:
        text += (
            f" The validation split ({guard['requests']} requests) cannot resolve Sem-MoE "
            "from contiguous placement; the placement fitted on the larger split is kept."
        )
    s = Section(
        title=f"Expert placement (Sem-MoE) on EP{placement.ep}",
        paragraphs=[text],
        figures=figures.placement_figures(placement),
    )
    s.table(
        ["method", "LAR", "imbalance (max/mean)", "a2a bytes/layer", "MoE layer (ms)"],
        [
            [
                k,
                f"{v.metrics['lar']:.3f}",
                f"{v.metrics['imbalance']:.3f}",
                f"{v.metrics['a2a_bytes_per_layer']:.3g}",
                f"{v.metrics['moe_layer_time_s'] * 1e3:.3f}",
            ]
            for k, v in placement.methods.items()
        ],
    )
    return s


def instance_eps(layout: Any) -> list[tuple[str, int]]:
    """(instance pool, EP degree) of a served layout: ``prefill`` and ``decode`` for a P/D or
    attention-FFN deployment (each pool is its own instance), one unnamed pool otherwise."""
    if hasattr(layout, "prefill") and hasattr(layout, "decode"):
        return [("prefill", int(layout.prefill.moe_ep)), ("decode", int(layout.decode.moe_ep))]
    return [("", int(layout.moe_ep))]


def winner_ep(result: PlanResult, serving: Any = None) -> int:
    """The EP degree of the plan the report's verdict picks (the serving winner if any; of a
    disaggregated one, its instance with the largest EP group)."""
    if serving is not None:
        return max(ep for _, ep in instance_eps(serving.winner.entry.layout))
    w = result.winner
    layout = w.plan.layout
    if w.family == "strategy":
        return int(layout.get("moe", {}).get("ep", 1))
    if w.family == "dep":
        return int(layout.get("eg", 1))
    eps = [m.get("ep", 1) for st in layout.get("stages", []) for m in st.get("modules", [])]
    return int(max(eps, default=1))


def _ep_note(win_ep: int, ep: int) -> str:
    """Say when the placement's EP group is not the winner's."""
    if win_ep == ep:
        return ""
    what = "has no expert parallelism" if win_ep <= 1 else f"runs EP{win_ep}"
    return (
        f" The winner {what}; this placement is an estimate on EP{ep} (a divisor of the "
        "experts within one node), not a placement for the winner's layout."
    )


def _launch_section(exports: dict[str, Any]) -> Section:
    s = Section(title="Launch scripts")
    rows = []
    for engine, ex in exports.items():
        script = f"launch/{engine}/launch.sh"
        if ex.label is None:
            rows.append([script, "— (cannot launch; the script exits 1)", "—", "—"])
            continue
        dep = ex.deployment or {}
        what = ", ".join(f"{p['instances']} x {role}" for role, p in dep.get("pools", {}).items())
        label = f"{ex.label} — {what}, {dep.get('gpus', '?')} GPUs" if dep else ex.label
        rows.append([script, label, f"{ex.per_gpu:,.1f} {ex.unit}", f"{ex.gap:.2f}x"])
        s.paragraphs += [f"{engine}: {n}" for n in ex.warnings]
        if ex.skipped:
            s.paragraphs.append(
                f"{engine}: {len(ex.skipped)} faster strategies were skipped "
                f"because {engine} cannot run them, e.g. {ex.skipped[0]}"
            )
    s.table(["script", "launches", "predicted", "winner ÷ launched (per GPU)"], rows)
    return s


def _error_section(cm: Any) -> Section:
    s = Section(title="How far to trust the cost model")
    prof = cm.profile
    if prof is not None and not prof.quality:
        s.paragraphs.append(
            f"Cost model: profile {prof.name} ({prof.source}). Its coefficients are published, "
            "not fitted here, so moeplan cannot state their error; for reference, the held-out "
            "errors of the H100 model fitted to NVIDIA's measurements are below."
        )
    elif prof is None:
        s.paragraphs.append(
            f"Cost model: {cm.profile_name}. No measured table exists for this GPU, so times "
            "come from datasheet rooflines (70% of peak FLOP/s, 80% of memory bandwidth); their "
            "error is unmeasured. On H100 the fitted model's held-out errors are below."
        )
    if prof is None or not prof.quality:
        from moeplan.cost import load_profile

        prof = load_profile("h100_sxm")
    s.paragraphs.append(f"Held-out error of profile {prof.name} ({prof.source}).")
    s.table(
        ["fit", "R²", "held-out median error", "held-out p90 error", "rows"],
        [
            [
                k,
                f"{q.r2:.4f}",
                f"{100 * (q.heldout_median_ape or 0):.1f}%",
                f"{100 * (q.heldout_p90_ape or 0):.1f}%",
                f"{q.n_fit}+{q.n_heldout}",
            ]
            for k, q in prof.quality.items()
        ],
    )
    return s


def workload_text(w: Any) -> str:
    """The workload in words; an unset arrival rate is said, never printed as None."""
    rate = (
        "arrival rate not set (one closed batch)"
        if w.rate is None
        else f"arrival rate {w.rate:g} requests/s"
    )
    return f"batch {w.batch} prompts, {w.isl} prompt tokens, {w.osl} output tokens each; {rate}"


def _inputs_section(m: Any, c: Any, w: Any, cm: Any) -> Section:
    s = Section(title="Inputs")
    s.table(
        ["input", "value"],
        [
            [
                "model",
                f"{m.name} ({m.architecture}), {m.num_layers} layers, {m.num_experts} experts, "
                f"top-{m.top_k}, {m.params_total / 1e9:.1f}B params",
            ],
            [
                "cluster",
                f"{c.name}: {c.num_nodes}×{c.gpus_per_node} {c.gpu.name}, "
                f"{c.gpu.mem_bytes / GIB:.0f} GiB, intra {c.intra.kind} "
                f"{c.intra.bw / 1e9:.1f} GB/s, inter {c.inter.kind} {c.inter.bw / 1e9:.2f} GB/s",
            ],
            ["cluster source", c.source],
            ["workload", workload_text(w)],
            ["cost model", cm.profile_name],
        ],
    )
    return s
