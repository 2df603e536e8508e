"""Artifacts of ``moeplan plan``: plan.json, report.html, launchers, timeline, expert location.

The files are written as one set (:class:`moeplan.io.OutputSet`): staged in a hidden folder
next to ``--out`` and swapped in together, so an interrupted run never leaves a mix. The timeline is the
winner's simulated schedule on :mod:`moeplan.sim`: FinDEP's own task graph; for MixServe a
per-layer compute → communication chain of the prefill step (Eq. 6 adds them, no overlap);
for SMIDT the stages' micro-batch pipeline.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.io import OutputSet
from moeplan.planners.plan import Plan
from moeplan.planners.rank import Candidate, PlanResult
from moeplan.report import figures
from moeplan.report.html import Section, render
from moeplan.sim import Schedule, TaskGraph, chrome_trace, simulate
from moeplan.units import GIB


def strategy_timeline(c: Candidate, layers: int) -> Schedule:
    """MixServe prefill step: per layer compute then communication (then P2P per stage)."""
    p = c.plan.predicted["prefill_s"]
    g = TaskGraph()
    prev: list[int] = []
    for i in range(layers):
        a = g.add(f"L{i} compute", "GPU compute", p["compute"] / layers, prev, kind="compute")
        b = g.add(f"L{i} comm", "interconnect", p["comm"] / layers, [a], kind="communication")
        prev = [b]
    if p.get("p2p", 0) > 0:
        g.add("PP P2P", "interconnect", p["p2p"], prev, kind="p2p")
    return simulate(g).check()


def pipeline_timeline(c: Candidate, micro_batches: int = 4) -> Schedule:
    """SMIDT: ``micro_batches`` micro-batches flowing through the stages (no P2P shown)."""
    stages = c.detail.plan.stages
    g = TaskGraph()
    last: dict[int, int] = {}
    for mb in range(micro_batches):
        prev: list[int] = []
        for s, st in enumerate(stages):
            deps = prev + ([last[s]] if s in last else [])
            t = g.add(f"mb{mb} stage{s}", f"stage {s}", st.time_s, deps,
                      kind=f"micro-batch {mb}")
            last[s] = t
            prev = [t]
    return simulate(g).check()


def winner_trace(result: PlanResult) -> dict[str, Any]:
    w = result.winner
    meta = {"model": result.model.name, "cluster": result.cluster.name, "family": w.family,
            "label": w.label}
    if w.family == "dep":
        from moeplan.planners.dep.planner import chrome_traces

        return chrome_traces(w.detail, layers=min(4, w.detail.problem.layers))
    if w.family == "pipeline":
        return chrome_trace({w.label: pipeline_timeline(w)}, metadata=meta)
    return chrome_trace({w.label: strategy_timeline(w, result.model.num_layers)}, metadata=meta)


ARTIFACTS = frozenset({"plan.json", "report.html", "timeline.json", "sglang.sh", "vllm.sh",
                       "expert_location.json"})


def check_outdir(outdir: Path) -> None:
    """Refuse an ``--out`` that would lose a user's files, before any planning is done."""
    OutputSet(outdir, known=set(ARTIFACTS))


def _launchers(out: OutputSet, result: PlanResult, model_arg: str) -> dict[str, str]:
    """sglang.sh / vllm.sh for the best colocated strategy, with plain caveats."""
    from moeplan.export.launcher import render_launcher
    from moeplan.export.sglang import sglang_args
    from moeplan.export.vllm import vllm_args

    strat = next((c for c in result.candidates if c.family == "strategy"), None)
    files = {}
    for engine, fn in (("sglang", sglang_args), ("vllm", vllm_args)):
        name = f"{engine}.sh"
        if strat is None:
            files[engine] = str(out.write(
                name, "#!/usr/bin/env bash\necho 'moeplan: no colocated strategy was "
                "planned (strategy family skipped), nothing to launch' >&2\nexit 1\n",
                executable=True))
            continue
        best = min((r for r in strat.detail.strategies if r.strategy.label() == strat.label),
                   key=lambda r: r.prefill.total_s)
        exp = fn(best.strategy, model_path=model_arg, num_nodes=result.cluster.num_nodes)
        notes = [f"moeplan plan: {result.model.name} on {result.cluster.name}",
                 f"strategy: {strat.label}"]
        if result.winner.family != "strategy":
            notes.append(f"the overall winner is the {result.winner.family} family "
                         f"({result.winner.label}), which {engine} cannot launch; this is the "
                         f"best colocated strategy, {result.winner.per_gpu / strat.per_gpu:.2f}x "
                         "slower per GPU by moeplan's model")
        notes += [f"WARNING: {x}" for x in exp.warnings]
        if exp.expressible and exp.args:
            text = render_launcher(exp.args, notes)
        else:
            body = "\n".join(f"# {n}" for n in notes)
            text = (f"#!/usr/bin/env bash\n{body}\necho 'moeplan: {engine} cannot "
                    "express this strategy; see the warnings above' >&2\nexit 1\n")
        files[engine] = str(out.write(name, text, executable=True))
    return files


def winner_plan(result: PlanResult, placement: Any, trace: str | None) -> Plan:
    """The winner's :class:`Plan` with the ranking and (when traced) its expert placement."""
    plan = replace(result.winner.plan, ranking=[c.summary() for c in result.candidates])
    if placement is not None and trace is not None:
        from moeplan.planners.placement import physical_to_logical

        p2l = physical_to_logical(placement.methods["semmoe"].y, placement.ep)
        plan = replace(plan, details={**plan.details, "placement": {
            "ep": placement.ep, "physical_to_logical_map": p2l.tolist(),
            "moe_layers": list(result.model.moe_layers)}})
    return plan


def write_artifacts(outdir: Path, result: PlanResult, placement: Any, cm: Any, *,
                    model_arg: str, trace: str | None) -> dict[str, str]:
    """Write every artifact as one set (:class:`moeplan.io.OutputSet`); ``{kind: path}``."""
    files: dict[str, str] = {"dir": str(outdir)}
    plan = winner_plan(result, placement, trace)
    html = render_report(result, placement, cm, trace)  # before any file: it may fail
    with OutputSet(outdir, known=set(ARTIFACTS)) as out:
        if "placement" in plan.details:
            from moeplan.export.expert_location import write_sglang_expert_location

            write_sglang_expert_location(out.path("expert_location.json"),
                                         np.asarray(plan.details["placement"]
                                                    ["physical_to_logical_map"]),
                                         ep=placement.ep,
                                         num_hidden_layers=result.model.num_layers,
                                         moe_layers=result.model.moe_layers)
            files["expert_location"] = str(outdir / "expert_location.json")
        files["plan"] = str(out.write("plan.json", plan.to_json()))
        files["timeline"] = str(out.write("timeline.json",
                                          json.dumps(winner_trace(result), default=_np)))
        files.update(_launchers(out, result, model_arg))
        files["report"] = str(out.write("report.html", html))
    return files


def _np(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(type(o).__name__)


def render_report(result: PlanResult, placement: Any, cm: Any, trace: str | None) -> str:
    m, c, w = result.model, result.cluster, result.workload
    summary = Section(title="Verdict", paragraphs=list(result.explanation))
    summary.table(["#", "family", "plan", "GPUs", "prompt tokens/s/GPU", "TTFT (ms)",
                   "ITL (ms)", "memory/GPU (GiB)", "bound"],
                  [[i, figures.FAMILY_NAMES[x.family], x.label, x.gpus, f"{x.per_gpu:,.0f}",
                    f"{x.ttft_s * 1e3:.1f}", f"{x.itl_s * 1e3:.2f}" if x.itl_s else "—",
                    f"{x.mem_bytes_per_gpu / GIB:.1f}", x.bound]
                   for i, x in enumerate(result.candidates, 1)], highlight=0)
    for fam, why in result.skipped.items():
        summary.paragraphs.append(f"{figures.FAMILY_NAMES[fam]} was not planned: {why}")
    summary.figures.append(figures.families_bar(result))
    sections = [summary]
    by_family = {x.family: x for x in result.candidates}
    if "dep" in by_family:
        d = by_family["dep"]
        sections.append(Section(
            title="Disaggregated (FinDEP): schedule",
            paragraphs=[f"FinDEP {d.label}: {d.extra['speedup_vs_pppipe']:.2f}x PPPipe and "
                        f"{d.extra['speedup_vs_naive']:.2f}x naive DEP on the same simulator."],
            figures=[figures.dep_gantt(d)]))
    if "pipeline" in by_family:
        sections.append(Section(title="Pipelined (SMIDT): stages",
                                figures=[figures.pipeline_stages(by_family["pipeline"],
                                                                 c.gpu.mem_bytes)]))
    if "strategy" in by_family:
        s = by_family["strategy"]
        sections.append(Section(title="Colocated hybrid (MixServe): Pareto front",
                                paragraphs=[f"{len(s.detail.strategies)} strategies fit memory; "
                                            f"{s.detail.rejected_memory} were rejected for memory "
                                            f"and {s.detail.rejected_shape} for shape."],
                                figures=[figures.pareto(s)]))
    if placement is not None:
        sem = placement.methods["semmoe"].metrics
        sections.append(Section(
            title=f"Expert placement (Sem-MoE) on EP{placement.ep}",
            paragraphs=[f"Trace: {trace or 'none given; a synthetic trace with the model shape, first '}"
                        f"{'' if trace else str(placement.methods['semmoe'].y.shape[0]) + ' MoE layers (no expert_location.json is exported from it)'}."
                        f" Sem-MoE keeps {100 * sem['lar']:.1f}% of expert activations on the "
                        f"token's own GPU."
                        + (" Sem-MoE did not beat contiguous placement on the validation split,"
                           " so its guard kept contiguous placement." if placement.fallback
                           else "")],
            figures=figures.placement_figures(placement)))
        sections[-1].table(["method", "LAR", "imbalance", "a2a bytes/layer", "MoE layer (ms)"],
                           [[k, f"{v.metrics['lar']:.3f}", f"{v.metrics['imbalance']:.3f}",
                             f"{v.metrics['a2a_bytes_per_layer']:.3g}",
                             f"{v.metrics['moe_layer_time_s'] * 1e3:.3f}"]
                            for k, v in placement.methods.items()])
    sections.append(_error_section(cm))
    sections.append(_inputs_section(m, c, w, cm))
    return render(f"moeplan: {m.name} on {c.name}",
                  f"{c.num_gpus} × {c.gpu.name}, {w.batch} prompts × {w.isl} tokens "
                  f"(+{w.osl} out)", sections)


def _error_section(cm: Any) -> Section:
    s = Section(title="How far to trust the cost model")
    prof = cm.profile
    if prof is not None and not prof.quality:
        s.paragraphs.append(
            f"Cost model: profile {prof.name} ({prof.source}). Its coefficients are published, "
            "not fitted here, so moeplan cannot state their error; for reference, the held-out "
            "errors of the H100 model fitted to NVIDIA's measurements are below.")
    elif prof is None:
        s.paragraphs.append(
            f"Cost model: {cm.profile_name}. No measured table exists for this GPU, so times "
            "come from datasheet rooflines (70% of peak FLOP/s, 80% of memory bandwidth); their "
            "error is unmeasured. On H100 the fitted model's held-out errors are below.")
    if prof is None or not prof.quality:
        from moeplan.cost import load_profile

        prof = load_profile("h100_sxm")
    s.paragraphs.append(f"Held-out error of profile {prof.name} ({prof.source}).")
    s.table(["fit", "R²", "held-out median error", "held-out p90 error", "rows"],
            [[k, f"{q.r2:.4f}", f"{100 * (q.heldout_median_ape or 0):.1f}%",
              f"{100 * (q.heldout_p90_ape or 0):.1f}%", f"{q.n_fit}+{q.n_heldout}"]
             for k, q in prof.quality.items()])
    return s


def _inputs_section(m: Any, c: Any, w: Any, cm: Any) -> Section:
    s = Section(title="Inputs")
    s.table(["input", "value"], [
        ["model", f"{m.name} ({m.architecture}), {m.num_layers} layers, {m.num_experts} experts, "
                  f"top-{m.top_k}, {m.params_total / 1e9:.1f}B params"],
        ["cluster", f"{c.name}: {c.num_nodes}×{c.gpus_per_node} {c.gpu.name}, "
                    f"{c.gpu.mem_bytes / GIB:.0f} GiB, intra {c.intra.kind} "
                    f"{c.intra.bw / 1e9:.1f} GB/s, inter {c.inter.kind} {c.inter.bw / 1e9:.2f} GB/s"],
        ["cluster source", c.source],
        ["workload", f"batch {w.batch}, isl {w.isl}, osl {w.osl}, rate {w.rate}"],
        ["cost model", cm.profile_name],
    ])
    return s
