"""Artifacts of ``moeplan plan``: plan.json, report.html, launchers, timeline, expert location.

Everything written is formatted from one :class:`moeplan.search.job.outcome.PlanOutcome`
(:func:`moeplan.search.job.run.plan_job` computed it; nothing here plans or simulates). The
``launch/`` folder comes from :mod:`moeplan.export.plan_export` (per engine, the whole
deployment — every replica and pool — it can run under its pinned version's rules); the report itself from :mod:`moeplan.report.sections`, listing the
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
from typing import TYPE_CHECKING, Any

import numpy as np

from moeplan.export.constraints import Target
from moeplan.export.launch_facts import needs_remote_code
from moeplan.export.plan_export import (
    ExportContext,
    LaunchExport,
    checkpoint_config,
    deployment_exports,
)
from moeplan.io import OutputSet
from moeplan.planners.plan import Plan
from moeplan.report.html import PLOTLY_FILE, plotly_js
from moeplan.report.sections import render_report
from moeplan.search.job.outcome import PlanOutcome, pricing_line

if TYPE_CHECKING:
    from moeplan.planners.rank import PlanResult
    from moeplan.search.ranking.entries import Entry
    from moeplan.search.ranking.result import ServeRanking

ARTIFACTS = frozenset(
    {
        "plan.json",
        "pareto.csv",
        "report.html",
        "timeline.json",
        "sglang.sh",
        "vllm.sh",
        "expert_location.json",
        "sglang_pd.sh",
        "vllm_pd.sh",
        "launch",
        PLOTLY_FILE,
    }
)  # sglang.sh / vllm.sh / *_pd.sh: earlier runs' names, replaced by launch/


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchFile:
    """One launch file written beside the plan, and what it starts (for the report's table)."""

    name: str
    text: str
    launches: str  # the deployment it starts, or why it cannot
    predicted: str = "—"  # its predicted figure with the unit
    gap: str = "—"  # the winner's figure over the launched one's (per GPU)
    notes: tuple[str, ...] = ()
    export: LaunchExport | None = None  # the engine's launch folder (launch.sh, stop.sh)


def check_outdir(outdir: Path) -> None:
    """Refuse an ``--out`` that would lose a user's files, before any planning is done."""
    OutputSet(outdir, known=set(ARTIFACTS))


def launch_exports(
    result: PlanResult,
    plan: Plan,
    *,
    model_path: str,
    full_layers: int,
    serving: ServeRanking | None = None,
    pricing: str = "",
    notes: tuple[str, ...] = (),
    remote_code: bool = False,
    versions: dict[str, str] | None = None,
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
        remote_code=remote_code,
        gpu=result.cluster.gpu,
        mla=result.model.attention == "mla",
        versions=versions or {},
    )
    return deployment_exports(result, serving, ctx)


def asked_versions(pricing: dict[str, Any]) -> dict[str, str]:
    """``{engine: release}`` of an ``--engine-version`` the plan was asked for (its kernel
    tables' engine), which that engine's launch files spell their flags for."""
    v = (pricing or {}).get("engine_version") or {}
    return {v["engine"]: v["requested"]} if v.get("requested") and v.get("engine") else {}


def launch_files(outcome: PlanOutcome) -> list[LaunchFile]:
    """Each engine's ``launch/<engine>/launch.sh`` of the outcome, in the order written: the
    whole deployment (replicas, P/D pools, router) the engine can run."""
    config = checkpoint_config(outcome.model.name) or checkpoint_config(outcome.model_path)
    exports = launch_exports(
        outcome.analytic,
        outcome.plan,
        model_path=outcome.model_path,
        full_layers=outcome.full_layers,
        serving=outcome.ranking,
        pricing=pricing_line(outcome.pricing),
        notes=outcome.fit_notes,
        remote_code=needs_remote_code(config),
        versions=asked_versions(outcome.pricing),
    )
    out = []
    for engine, ex in exports.items():
        name = f"launch/{engine}/launch.sh"
        if ex.label is None:
            out.append(
                LaunchFile(
                    name=name,
                    text=ex.text,
                    export=ex,
                    launches="— (cannot launch; the script exits 1)",
                )
            )
            continue
        notes = tuple(ex.warnings)
        if ex.skipped:
            notes += (
                f"{len(ex.skipped)} faster deployments were skipped because {engine} "
                f"cannot run them, e.g. {ex.skipped[0]}",
            )
        dep = ex.deployment or {}
        what = ", ".join(f"{p['instances']} x {role}" for role, p in dep.get("pools", {}).items())
        out.append(LaunchFile(name=name, text=ex.text, export=ex,
                              launches=f"{ex.label} — {what} servers, {dep.get('gpus')} GPUs",
                              predicted=f"{ex.per_gpu:,.1f} {ex.unit}", gap=f"{ex.gap:.2f}x",
                              notes=notes))  # fmt: skip
    return out


def _label(entry: Entry) -> str:
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
        loc = None
        if "placement" in plan.details:
            from moeplan.export.expert_location import sglang_expert_location

            loc = json.dumps(
                sglang_expert_location(
                    np.asarray(plan.details["placement"]["physical_to_logical_map"]),
                    ep=plan.details["placement"]["ep"],
                    num_hidden_layers=outcome.model.num_layers,
                    moe_layers=outcome.model.moe_layers,
                )
            )
            files["expert_location"] = str(out.write("expert_location.json", loc))
        files["plan"] = str(out.write("plan.json", plan.to_json()))
        files["pareto"] = str(out.write("pareto.csv", pareto_csv(outcome.curves)))
        timeline = json.dumps(outcome.timeline, default=_np)
        files["timeline"] = str(out.write("timeline.json", timeline))
        exports = {lf.name.split("/")[1]: lf.export for lf in launchers if lf.export is not None}
        write_launch_folder(out.path("launch"), exports, loc)
        files["launch"] = str(outdir / "launch")  # the final folder, not the set's staging one
        for engine in exports:  # each engine's launch.sh (what --json's artifacts name)
            files[engine] = str(outdir / "launch" / engine / "launch.sh")
        files["plotly"] = str(out.write(PLOTLY_FILE, plotly_js()))
        files["report"] = str(out.write("report.html", html))
    return files


PARETO_COLUMNS = ("on_front", "family", "deployment", "gpus", "rate_rps", "concurrency",
                  "batch_cap", "tokens_per_s_per_user", "tokens_per_s_per_gpu", "ttft_p50_s",
                  "ttft_p90_s", "tpot_p50_s", "tpot_p90_s", "meets_slo", "source")  # fmt: skip


def pareto_csv(curves: dict[str, Any]) -> str:
    """The load sweep's operating points as CSV (one row per point, ``on_front`` 1 for the
    Pareto front's): the figures of ``plan --json``'s ``pareto`` and the report's chart."""
    import csv
    import io

    front = curves.get("front") or []
    keys = {(p.get("label"), p.get("rate_rps")) for p in front}
    rows = [p for pts in (curves.get("sweep") or {}).values() for p in pts
            if p["source"] != "overload"] or list(front)  # fmt: skip
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(PARETO_COLUMNS)
    for p in rows:
        on = int((p.get("label"), p.get("rate_rps")) in keys)
        w.writerow([on, *(p.get(k, "") for k in PARETO_COLUMNS[1:])])
    return buf.getvalue()


def write_launch_folder(
    folder: Path, exports: dict[str, LaunchExport], expert_location: str | None
) -> Path:
    """``launch/``: ``deployment.json`` (what each engine's files start) and per engine
    ``launch.sh`` / ``stop.sh`` (executable), the files its servers read (TensorRT-LLM's
    YAML) and the ``expert_location.json`` they pass; ``k8s/<engine>.yaml`` the same
    deployment as Kubernetes objects (:mod:`moeplan.export.k8s`)."""
    folder.mkdir()
    deployments = {e: ex.deployment for e, ex in exports.items()}
    (folder / "deployment.json").write_text(json.dumps(deployments, indent=1) + "\n")
    for engine, ex in exports.items():
        sub = folder / engine
        sub.mkdir()
        for name, text in (ex.files or {"launch.sh": ex.text}).items():
            (sub / name).write_text(text, encoding="utf-8")
            if name.endswith(".sh"):
                (sub / name).chmod(0o755)
        if expert_location is not None and "--init-expert-location" in ex.text:
            (sub / "expert_location.json").write_text(expert_location)
        if ex.k8s is not None:
            (folder / "k8s").mkdir(exist_ok=True)
            (folder / "k8s" / f"{engine}.yaml").write_text(ex.k8s, encoding="utf-8")
        if ex.dynamo is not None:
            (folder / "k8s" / f"{engine}-dynamo.yaml").write_text(ex.dynamo, encoding="utf-8")
    return folder


def _np(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(type(o).__name__)
