"""``moeplan pipeline``'s inputs and answer: the routing profile (a profile file or shipped
name, a routing trace's mean k per MoE layer, or a synthetic Top-P profile), the ``--json``
object of a SMIDT :class:`moeplan.planners.pipeline.PipelineResult`, its files and each
stage's module choices in runs of layers.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from moeplan.commands.pricing import with_pricing
from moeplan.cost import CostModel
from moeplan.errors import MoeplanError, require
from moeplan.planners.pipeline import PipelinePlan, PipelineResult
from moeplan.planners.pipeline.stages import StagePlan
from moeplan.specs import ClusterSpec, ModelSpec, RoutingProfile, Workload
from moeplan.traces.routing_profiles import (
    mean_k_from_trace,
    profile_from_dict,
    synthetic_top_p_mean_k,
)


def read_routing_profile(path: str, model: ModelSpec) -> RoutingProfile:
    """A profile JSON file, or the name of a shipped one (``presets/routing/<name>.json``)."""
    file = Path(path)
    if not file.is_file():
        shipped = resources.files("moeplan.specs.presets").joinpath("routing", f"{path}.json")
        require(shipped.is_file(), f"--routing-profile ({path}) is not a file or a shipped profile")
        text = shipped.read_text(encoding="utf-8")
    else:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise MoeplanError(f"--routing-profile ({path}) cannot be read: {err}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise MoeplanError(f"--routing-profile ({path}) is not valid JSON: {err}") from None
    return profile_from_dict(data, num_moe_layers=model.num_moe_layers, top_k=model.top_k)


def routing_for(
    model: ModelSpec, profile: str | None, top_p: float | None, trace: str | None = None
) -> RoutingProfile:
    """The routing of ``--routing-profile``, ``--routing-trace`` or ``--top-p`` (at most one;
    none: the model's static top-k)."""
    given = sum(x is not None for x in (profile, top_p, trace))
    require(given <= 1, "--routing-profile, --routing-trace and --top-p are exclusive")
    if profile is not None:
        return read_routing_profile(profile, model)
    if trace is not None:
        from moeplan.traces.format import load_trace

        mean_k = mean_k_from_trace(load_trace(trace).experts)
        require(
            len(mean_k) == model.num_moe_layers,
            f"--routing-trace layers ({len(mean_k)}) must equal the model's MoE layers "
            f"({model.num_moe_layers})",
        )
        return RoutingProfile(top_k=model.top_k, mean_k=mean_k, source=f"trace {trace}")
    if top_p is not None:
        mean_k = synthetic_top_p_mean_k(
            model.num_moe_layers, model.num_experts, top_p, k_max=model.top_k
        )
        return RoutingProfile(
            top_k=model.top_k, mean_k=mean_k, source=f"synthetic top-p {top_p} (seed 0)"
        )
    return RoutingProfile.static(model.top_k)


def _plan_dict(p: PipelinePlan) -> dict:
    return {
        "pp": p.pp,
        "throughput_tokens_per_s": p.throughput_tokens_per_s,
        "throughput_sync_tokens_per_s": p.throughput_sync_tokens_per_s,
        "bottleneck_s": p.bottleneck_s,
        "period_s": p.period_s,
        "stages": [s.to_dict() for s in p.stages],
    }


def result_dict(res: PipelineResult, routing: RoutingProfile) -> dict:
    """The ``--json`` object (keys per the SMIDT issue)."""
    d = _plan_dict(res.plan)
    d.update(
        {
            "model": res.model,
            "cluster": res.cluster,
            "world_size": res.world_size,
            "async_pp": res.async_pp,
            "mem_limit_bytes": res.mem_limit_bytes,
            "routing": {"source": routing.source, "mean_k": list(routing.mean_k or ())},
            "baselines": {
                k: None if v is None else _plan_dict(v) for k, v in res.baselines.items()
            },
            "speedup_vs_uniform": res.speedup("uniform"),
            "speedup_vs_time_balanced": res.speedup("time_balanced"),
            "speedup_vs_no_pp": res.speedup("no_pp"),
            "per_pp": {
                str(s): None
                if p is None
                else {
                    "bottleneck_s": p.bottleneck_s,
                    "throughput_tokens_per_s": p.throughput_tokens_per_s,
                }
                for s, p in res.per_pp.items()
            },
            "search_ms": res.search_s * 1e3,
        }
    )
    if res.certificate is not None:
        d.update(res.certificate)
    if res.verify is not None:
        d.update(res.verify)
    return d


def pipeline_files(res: PipelineResult, price: dict[str, Any]) -> dict[str, Any]:
    """``--out``'s files by name: the plan and the stages figure (a function making it)."""
    from moeplan.report.command_figures import figure_html

    return {
        "plan.json": with_pricing(res.to_plan(), price).to_json(),
        "stages.html": lambda: figure_html(res),
    }


def stage_choices(stage: StagePlan) -> str:
    """Per module kind, runs of consecutive layers with one choice: ``attn0-11:t1d4 moe0-8:t2d2``."""
    runs: list[list] = []
    for kind in ("attn", "mlp", "moe"):
        for m, c in stage.modules:
            if m.kind != kind:
                continue
            label = (
                f"t{c.tp}"
                + (f"e{c.ep}" if c.ep > 1 else "")
                + (f"d{c.dpmoe}" if c.dpmoe > 1 else "")
            )
            if runs and runs[-1][0] == (kind, label) and runs[-1][2] == m.layer - 1:
                runs[-1][2] = m.layer
            else:
                runs.append([(kind, label), m.layer, m.layer])
    return " ".join(f"{k}{a}{'' if a == b else f'-{b}'}:{lab}" for (k, lab), a, b in runs)


def pipeline_price_sources(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, cm: CostModel, res: PipelineResult
) -> dict[str, dict[str, Any]]:
    """``price_sources`` of the chosen partition's period (``period_s``: its slowest stage or
    send per micro-batch), its stages' modules and sends repriced as the search priced them."""
    from moeplan.cost.price_sources import analytic, attribute, summarize
    from moeplan.planners.pipeline.cost import StageContext, cost_model_evaluator, p2p_seconds
    from moeplan.planners.pipeline.stages import pipeline_throughput

    p = res.plan
    ctx = StageContext(model=model, workload=workload, routing=workload.routing_for(model.top_k),
                       pp=p.pp, r=p.r, nvlink_domain=cluster.nvlink_domain)  # fmt: skip

    def period(c: CostModel) -> list[float]:
        ev = cost_model_evaluator(c)
        times = [sum(ev(m, ch, ctx).time_s for m, ch in s.modules) for s in p.stages]
        p2p = [p2p_seconds(c, ctx, j) if j < p.pp - 1 else 0.0 for j in range(p.pp)]
        return [pipeline_throughput(times, p2p, ctx.tokens_per_microbatch(), p.microbatches)[0]]

    return summarize(attribute(cm, period), **analytic(cm))
