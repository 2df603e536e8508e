"""Artifacts of ``moeplan plan``: plan.json, report.html, launchers, timeline, expert location.

Launch scripts come from :mod:`moeplan.export.plan_export` (the best strategy each engine can
run under its pinned version's rules); the report itself from :mod:`moeplan.report.sections`.
The files are written as one set (:class:`moeplan.io.OutputSet`): staged in a hidden folder
next to ``--out`` and swapped in together, so an interrupted run never leaves a mix.

``timeline.json`` (Chrome trace, opens in Perfetto): with a serving ranking, the serving
winner's simulated engine iterations (:func:`moeplan.serve.rank.serving_trace`); without one,
the analytic leader's schedule on :mod:`moeplan.sim` — FinDEP's own task graph; for MixServe a
per-layer compute → communication chain of the prefill step (Eq. 6 adds them, no overlap); for
SMIDT the stages' micro-batch pipeline.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.export.constraints import Target
from moeplan.export.plan_export import (
    PREFILL_UNIT,
    ExportContext,
    LaunchExport,
    Option,
    analytic_options,
    engine_export,
    model_path_for,
    serving_options,
)
from moeplan.io import OutputSet
from moeplan.planners.plan import Plan
from moeplan.planners.rank import Candidate, PlanResult
from moeplan.report.sections import render_report
from moeplan.sim import Schedule, TaskGraph, chrome_trace, simulate
from moeplan.specs import ModelSpec, load_model
from moeplan.units import GIB

ENGINES = ("sglang", "vllm")


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
            t = g.add(f"mb{mb} stage{s}", f"stage {s}", st.time_s, deps, kind=f"micro-batch {mb}")
            last[s] = t
            prev = [t]
    return simulate(g).check()


def winner_trace(result: PlanResult) -> dict[str, Any]:
    w = result.winner
    meta = {
        "model": result.model.name,
        "cluster": result.cluster.name,
        "family": w.family,
        "label": w.label,
    }
    if w.family == "dep":
        from moeplan.planners.dep.planner import chrome_traces

        return chrome_traces(w.detail, layers=min(4, w.detail.problem.layers))
    if w.family == "pipeline":
        return chrome_trace({w.label: pipeline_timeline(w)}, metadata=meta)
    return chrome_trace({w.label: strategy_timeline(w, result.model.num_layers)}, metadata=meta)


ARTIFACTS = frozenset(
    {
        "plan.json",
        "report.html",
        "timeline.json",
        "sglang.sh",
        "vllm.sh",
        "expert_location.json",
        "sglang_pd.sh",
        "vllm_pd.sh",
    }
)


def check_outdir(outdir: Path) -> None:
    """Refuse an ``--out`` that would lose a user's files, before any planning is done."""
    OutputSet(outdir, known=set(ARTIFACTS))


def launch_exports(
    result: PlanResult,
    plan: Plan,
    *,
    model_path: str,
    full: ModelSpec,
    serving: Any = None,
    pricing: str = "",
) -> dict[str, LaunchExport]:
    """Each engine's launch script (:mod:`moeplan.export.plan_export`) for ``plan``: in the
    serving ranking's order when there is one, else by the analytic prefill figure.
    ``pricing``: the header line naming the engine whose kernels priced the plan."""
    place = plan.details.get("placement")
    width = len(place["physical_to_logical_map"][0]) if place else None
    ctx = ExportContext(
        model_path=model_path,
        target=Target.of(result.model, result.cluster),
        planned_layers=result.model.num_layers,
        full_layers=full.num_layers,
        placement_ep=place["ep"] if place else None,
        placement_width=width,
        notes=tuple(_fit_notes(result, full)),
        pricing=pricing,
    )
    if serving is not None:
        options = serving_options(serving)
        winner = options[0] if options else None
    else:
        options = analytic_options(result)
        w = result.winner
        winner = Option(
            strategy=None, label=w.label, family=w.family, per_gpu=w.per_gpu, unit=PREFILL_UNIT
        )
    return {e: engine_export(e, result, ctx, options, winner) for e in ENGINES}


def _fit_notes(result: PlanResult, full: ModelSpec) -> list[str]:
    """When the plan was made on a truncated model: whether the full model's weights fit."""
    m, c = result.model, result.cluster
    if m.num_layers >= full.num_layers:
        return []
    from moeplan.cost.memory import RESERVED_BYTES, weights_floor_per_gpu

    need = weights_floor_per_gpu(full, c.num_gpus)
    usable = c.gpu.mem_bytes - RESERVED_BYTES
    if need <= usable:
        return []
    return [
        f"the full model's weights alone need {need / GIB:.1f} GiB per GPU even spread over "
        f"all {c.num_gpus} GPUs; {c.gpu.name} has {usable / GIB:.1f} GiB usable: this "
        "launch will run out of memory"
    ]


def winner_plan(result: PlanResult, placement: Any, trace: str | None, serving: Any = None) -> Plan:
    """The winner's :class:`Plan` (the serving winner when ``serving`` is given) with the
    ranking and (when traced) its expert placement."""
    if serving is not None:
        from moeplan.serve.rank import served_plan

        plan = replace(
            served_plan(serving.winner, serving), ranking=[s.summary() for s in serving.ranked]
        )
    else:
        plan = replace(result.winner.plan, ranking=[c.summary() for c in result.candidates])
    if placement is not None and trace is not None:
        from moeplan.planners.placement import physical_to_logical

        sem = placement.methods["semmoe"]
        phys = sem.y if sem.replicas is None else sem.replicas
        p2l = physical_to_logical(phys, placement.ep)
        plan = replace(
            plan,
            details={
                **plan.details,
                "placement": {
                    "ep": placement.ep,
                    "physical_to_logical_map": p2l.tolist(),
                    "moe_layers": list(result.model.moe_layers),
                },
            },
        )
    return plan


def write_artifacts(
    outdir: Path,
    result: PlanResult,
    placement: Any,
    cm: Any,
    *,
    model_arg: str,
    trace: str | None,
    model_path: str | None = None,
    serving: Any = None,
) -> dict[str, str]:
    """Write every artifact as one set (:class:`moeplan.io.OutputSet`); ``{kind: path}``.

    ``model_path``: what the launch scripts load (default: :func:`model_path_for`); the model
    they launch is ``model_arg`` in full, so a plan on fewer layers is flagged. ``serving``: the
    serving ranking (:mod:`moeplan.serve.rank`), whose winner plan.json holds and whose order
    the launch scripts follow.
    """
    files: dict[str, str] = {"dir": str(outdir)}
    plan = winner_plan(result, placement, trace, serving)
    full = load_model(model_arg)
    from moeplan.kernel_tables import pricing, pricing_line

    exports = launch_exports(
        result,
        plan,
        model_path=model_path_for(model_arg, model_path),
        full=full,
        serving=serving,
        pricing=pricing_line(pricing(cm)),
    )
    html = render_report(
        result, placement, cm, trace, exports, full.num_layers, serving
    )  # before any file: it may fail
    if serving is not None:  # the served winner's engine iterations
        from moeplan.serve.rank import serving_trace

        timeline = serving_trace(serving, result.model, result.cluster, cm)
    else:  # the analytic leader's task schedule
        timeline = winner_trace(result)
    with OutputSet(outdir, known=set(ARTIFACTS)) as out:
        if "placement" in plan.details:
            from moeplan.export.expert_location import write_sglang_expert_location

            write_sglang_expert_location(
                out.path("expert_location.json"),
                np.asarray(plan.details["placement"]["physical_to_logical_map"]),
                ep=placement.ep,
                num_hidden_layers=result.model.num_layers,
                moe_layers=result.model.moe_layers,
            )
            files["expert_location"] = str(outdir / "expert_location.json")
        files["plan"] = str(out.write("plan.json", plan.to_json()))
        files["timeline"] = str(out.write("timeline.json", json.dumps(timeline, default=_np)))
        for engine, ex in exports.items():
            files[engine] = str(out.write(f"{engine}.sh", ex.text, executable=True))
        if serving is not None and serving.winner.entry.family == "pd":
            from moeplan.export.sglang import sglang_pd_script

            pd = sglang_pd_script(
                serving.winner.entry.layout,
                model_path=model_path_for(model_arg, model_path),
                target=Target.of(result.model, result.cluster),
            )
            files["sglang_pd"] = str(out.write("sglang_pd.sh", pd, executable=True))
            from moeplan.export.vllm import vllm_pd_script

            vpd = vllm_pd_script(
                serving.winner.entry.layout,
                model_path=model_path_for(model_arg, model_path),
                target=Target.of(result.model, result.cluster),
            )
            files["vllm_pd"] = str(out.write("vllm_pd.sh", vpd, executable=True))
        files["report"] = str(out.write("report.html", html))
    return files


def _np(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(type(o).__name__)
