"""Artifacts of ``moeplan plan``: plan.json, report.html, launchers, timeline, expert location.

Everything written is formatted from one :class:`moeplan.serve.outcome.PlanOutcome`
(:func:`moeplan.serve.job.plan_job` computed it; nothing here plans or simulates). Launch
scripts come from :mod:`moeplan.export.plan_export` (the best strategy each engine can run under
its pinned version's rules); the report itself from :mod:`moeplan.report.sections`, listing the
launch files this module writes. The files are written as one set
(:class:`moeplan.io.OutputSet`): staged in a hidden folder next to ``--out`` and swapped in
together, so an interrupted run never leaves a mix.

``timeline.json`` (Chrome trace, opens in Perfetto): the serving winner's simulated engine
iterations. ``plotly.min.js``: the charting library, once, beside report.html (inlined it
would make every report ~5 MB).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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
    serving_options,
)
from moeplan.io import OutputSet
from moeplan.planners.families import family
from moeplan.planners.plan import Plan
from moeplan.report.html import PLOTLY_FILE, plotly_js
from moeplan.report.sections import render_report
from moeplan.serve.outcome import PlanOutcome, pricing_line

ENGINES = ("sglang", "vllm")


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
        PLOTLY_FILE,
    }
)


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchFile:
    """One launch file written beside the plan, and what it starts (for the report's table)."""

    name: str
    text: str
    launches: str  # the deployment it starts, or why it cannot
    predicted: str = "—"  # its predicted figure with the unit
    gap: str = "—"  # the winner's figure over the launched one's (per GPU)
    notes: tuple[str, ...] = ()


def check_outdir(outdir: Path) -> None:
    """Refuse an ``--out`` that would lose a user's files, before any planning is done."""
    OutputSet(outdir, known=set(ARTIFACTS))


def launch_exports(
    result: Any,
    plan: Plan,
    *,
    model_path: str,
    full_layers: int,
    serving: Any = None,
    pricing: str = "",
    notes: tuple[str, ...] = (),
) -> dict[str, LaunchExport]:
    """Each engine's launch script (:mod:`moeplan.export.plan_export`) for ``plan``: in the
    serving ranking's order when there is one, else by the analytic prefill figure.
    ``pricing``: the header line naming the engine whose kernels priced the plan; ``notes``:
    warnings every script carries (e.g. the full model's weights do not fit)."""
    place = plan.details.get("placement")
    width = len(place["physical_to_logical_map"][0]) if place else None
    ctx = ExportContext(
        model_path=model_path,
        target=Target.of(result.model, result.cluster),
        planned_layers=result.model.num_layers,
        full_layers=full_layers,
        placement_ep=place["ep"] if place else None,
        placement_width=width,
        notes=notes,
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


def launch_files(outcome: PlanOutcome) -> list[LaunchFile]:
    """Every launch file of the outcome, in the order written: each engine's colocated script
    and, when a P/D deployment wins, its SGLang P/D script."""
    exports = launch_exports(
        outcome.analytic,
        outcome.plan,
        model_path=outcome.model_path,
        full_layers=outcome.full_layers,
        serving=outcome.ranking,
        pricing=pricing_line(outcome.pricing),
        notes=outcome.fit_notes,
    )
    out = []
    for engine, ex in exports.items():
        name = f"{engine}.sh"
        if ex.label is None:
            out.append(LaunchFile(name=name, text=ex.text,
                                  launches="— (cannot launch; the script exits 1)"))
            continue
        notes = tuple(ex.warnings)
        if ex.skipped:
            notes += (f"{len(ex.skipped)} faster deployments were skipped because {engine} "
                      f"cannot run them, e.g. {ex.skipped[0]}",)
        out.append(LaunchFile(name=name, text=ex.text, launches=ex.label,
                              predicted=f"{ex.per_gpu:,.1f} {ex.unit}", gap=f"{ex.gap:.2f}x",
                              notes=notes))  # fmt: skip
    win = outcome.winner
    if family(win.entry.family).launch == "pools":
        from moeplan.export.sglang import sglang_pd_script
        from moeplan.export.vllm import vllm_pd_script

        m = win.metrics
        figure = ("—" if m is None else
                  f"{m.output_tokens_per_s_per_gpu:,.1f} output tokens/s per GPU (simulated)")
        for name, script in (("sglang_pd.sh", sglang_pd_script), ("vllm_pd.sh", vllm_pd_script)):
            text = script(win.entry.layout, model_path=outcome.model_path,
                          target=Target.of(outcome.model, outcome.cluster))
            out.append(LaunchFile(name=name, text=text, launches=_label(win.entry),
                                  predicted=figure, gap="1.00x"))  # fmt: skip
    return out


def _label(entry: Any) -> str:
    lab, lay = entry.label, entry.layout_label
    return lab if lab == lay else f"{lab} ({lay})"


def write_artifacts(outdir: Path, outcome: PlanOutcome) -> dict[str, str]:
    """Write every artifact of ``outcome`` as one set (:class:`moeplan.io.OutputSet`);
    ``{kind: path}``. The report lists the launch files exactly as written here."""
    files: dict[str, str] = {"dir": str(outdir)}
    plan = outcome.plan
    launchers = launch_files(outcome)
    html = render_report(outcome, launchers)  # before any file: it may fail
    with OutputSet(outdir, known=set(ARTIFACTS)) as out:
        if "placement" in plan.details:
            from moeplan.export.expert_location import write_sglang_expert_location

            write_sglang_expert_location(
                out.path("expert_location.json"),
                np.asarray(plan.details["placement"]["physical_to_logical_map"]),
                ep=plan.details["placement"]["ep"],
                num_hidden_layers=outcome.model.num_layers,
                moe_layers=outcome.model.moe_layers,
            )
            files["expert_location"] = str(outdir / "expert_location.json")
        files["plan"] = str(out.write("plan.json", plan.to_json()))
        timeline = json.dumps(outcome.timeline, default=_np)
        files["timeline"] = str(out.write("timeline.json", timeline))
        for lf in launchers:
            files[lf.name.removesuffix(".sh")] = str(out.write(lf.name, lf.text, executable=True))
        files["plotly"] = str(out.write(PLOTLY_FILE, plotly_js()))
        files["report"] = str(out.write("report.html", html))
    return files


def _np(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(type(o).__name__)
