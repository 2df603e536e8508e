"""What ``serve-sim --plan`` simulates: exactly the deployment ``moeplan plan`` served.

A ``plan.json`` written by ``moeplan plan`` records, under ``predicted.serving``, the instance
it served (``serve_layout``: every degree, redundant experts, fusion, micro-batches), how
many ``replicas`` of it, the instance ``knobs`` (all-to-all backend, two-batch overlap, KV
dtype) and the engine settings the capacity search chose (``engine.chunk_tokens``,
``engine.max_running``). :func:`served_deployment` reads them back, so the simulation repeats
the plan's own and its figures match. A plan without that record (written by ``strategy`` or
``pipeline``) is read from its layout alone (:func:`layout_from_plan`: a strategy plan's
degrees, a pipeline plan's most common module choice per block).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from moeplan.errors import MoeplanError, check_int, require
from moeplan.planners.layout import Layout
from moeplan.planners.plan import Plan
from moeplan.specs.cluster import MAX_GPUS_PER_NODE, MAX_NODES

MAX_REPLICAS = 1 << 20  # far beyond any cluster preset's GPUs (specs/cluster.py bounds)


@dataclass(frozen=True, kw_only=True)
class ServedDeployment:
    """The colocated deployment a plan's serving prediction was made on."""

    layout: Layout
    replicas: int
    knobs: dict[str, Any] | None
    chunk_tokens: int | None
    max_running: int | None


def served_deployment(plan: Plan) -> ServedDeployment | None:
    """``plan``'s served deployment (None when it records none); one-line errors naming the
    field for a corrupt record."""
    serving = plan.predicted.get("serving") if isinstance(plan.predicted, dict) else None
    if not isinstance(serving, dict) or "serve_layout" not in serving:
        return None
    where = "plan.predicted.serving"
    lay = serving["serve_layout"]
    if not isinstance(lay, dict):
        raise MoeplanError(f"{where}.serve_layout ({lay!r}) must be a JSON object")
    try:
        layout = Layout.from_dict(lay)
    except TypeError as err:
        raise MoeplanError(f"{where}.serve_layout is malformed: {err}") from None
    replicas = serving.get("replicas", lay.get("replicas", 1))  # the entry's, else the layout's
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise MoeplanError(f"{where}.replicas ({replicas!r}) must be an integer")
    check_int(f"{where}.replicas", replicas, 1, MAX_REPLICAS)
    got = serving.get("engine")
    engine: dict[str, Any] = got if isinstance(got, dict) else {}
    knobs = serving.get("knobs")
    return ServedDeployment(
        layout=layout,
        replicas=replicas,
        knobs=knobs if isinstance(knobs, dict) else None,
        chunk_tokens=_count(engine, "chunk_tokens", where),
        max_running=_count(engine, "max_running", where),
    )


def _count(engine: dict, key: str, where: str) -> int | None:
    v = engine.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise MoeplanError(f"{where}.engine.{key} ({v!r}) must be an integer")
    return check_int(f"{where}.engine.{key}", v, 0, 1 << 30)


def plan_knobs(
    served: ServedDeployment, a2a: str, tbo: bool | None, kv_dtype: str
) -> tuple[str, bool | None, str]:
    """The plan's all-to-all backend, two-batch overlap and KV dtype, unless a flag is given."""
    k = served.knobs or {}
    return (
        str(k.get("a2a", a2a)) if a2a == "auto" else a2a,
        bool(k.get("tbo")) if tbo is None and "tbo" in k else tbo,
        str(k.get("kv_dtype", kv_dtype)) if kv_dtype == "auto" else kv_dtype,
    )


def plan_overlap(served: ServedDeployment) -> bool | None:
    """The plan's host overlap (``knobs.overlap_schedule``: true, false or null, the engine's
    default); anything else is one line."""
    v = (served.knobs or {}).get("overlap_schedule")
    if v is not None and not isinstance(v, bool):
        raise MoeplanError(f"plan knobs.overlap_schedule ({v!r}) must be true, false or null")
    return v


def layout_from_plan(plan: Plan) -> Layout:
    """The serving layout of a ``strategy`` or ``pipeline`` plan (pipeline: each block's most
    common module choice over all stages, DPMoE counted into the MoE EP span)."""
    pools = plan.details.get("disaggregation")
    if pools is not None:  # PD / AFD pools, not one engine
        kind = pools.get("kind") if isinstance(pools, dict) else pools
        raise MoeplanError(
            f"plan.details.disaggregation ({kind}) is a disaggregated deployment: serve-sim "
            "simulates one engine; `moeplan plan` simulates its prefill and decode pools"
        )
    read = PLAN_LAYOUTS.get(plan.family)
    if read is not None:
        return read(plan)
    raise MoeplanError(
        f"plan.family ({plan.family!r}) is not simulated by serve-sim: only "
        "strategy and pipeline plans (attention-FFN disaggregated serving of a "
        "dep plan is not modelled); give the layout with --attn-tp ... instead"
    )


# a parallel degree past every GPU a cluster spec can hold is corrupt (specs/cluster.py)
MAX_DEGREE = MAX_NODES * MAX_GPUS_PER_NODE
MODULE_KINDS = ("attn", "moe", "mlp")  # what the pipeline planner writes (planners/pipeline)


def _degree(field: str, value: Any) -> int:
    """A parallel degree read from plan.json: a JSON integer in 1..MAX_DEGREE (no strings,
    fractions or booleans: a plan moeplan wrote holds integers)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MoeplanError(f"plan.layout.{field} ({value!r}) must be an integer")
    return check_int(f"plan.layout.{field}", value, 1, MAX_DEGREE)


def _section(lay: Any, key: str) -> dict:
    require(isinstance(lay, dict), "plan.layout must be a JSON object")
    sec = lay.get(key)
    require(isinstance(sec, dict), f"plan.layout.{key} ({sec!r}) must be a JSON object")
    return sec


def _strategy_layout(plan: Plan) -> Layout:
    """A strategy plan's serving layout: its degrees, fused as MixServe chose."""
    lay = plan.layout
    attn, moe = _section(lay, "attn"), _section(lay, "moe")
    return Layout(
        attn_tp=_degree("attn.tp", attn.get("tp")),
        attn_dp=_degree("attn.dp", attn.get("dp")),
        moe_tp=_degree("moe.tp", moe.get("tp")),
        moe_ep=_degree("moe.ep", moe.get("ep")),
        pp=_degree("pp", lay.get("pp", 1)),
        fused=plan.details.get("fused") is True,
    )


def _pipeline_layout(lay: Any) -> Layout:
    """A pipeline plan's serving layout: each block's most common module choice."""
    require(isinstance(lay, dict), "plan.layout must be a JSON object")
    stages = lay.get("stages")
    require(
        isinstance(stages, list) and len(stages) >= 1,
        "plan.layout.stages must be a non-empty list",
    )
    attn, moe = [], []
    for j, st in enumerate(stages):
        mods = st.get("modules") if isinstance(st, dict) else None
        require(
            isinstance(mods, list) and len(mods) >= 1,
            f"plan.layout.stages[{j}].modules must be a non-empty list",
        )
        for i, m in enumerate(mods):
            where = f"stages[{j}].modules[{i}]"
            require(isinstance(m, dict), f"plan.layout.{where} must be a JSON object")
            kind = m.get("kind")
            require(
                kind in MODULE_KINDS,
                f"plan.layout.{where}.kind ({kind!r}) must be one of {', '.join(MODULE_KINDS)}",
            )
            tp, dp = _degree(f"{where}.tp", m.get("tp")), _degree(f"{where}.dpmoe", m.get("dpmoe"))
            if kind == "attn":
                attn.append((tp, dp))
            elif kind == "moe":
                moe.append((tp, _degree(f"{where}.ep", m.get("ep")) * dp))
    a = max(set(attn), key=attn.count) if attn else (1, 1)
    e = max(set(moe), key=moe.count) if moe else a
    pp = _degree("pp", lay.get("pp"))
    require(pp == len(stages), f"plan.layout.pp ({pp}) must equal its stages ({len(stages)})")
    return Layout(attn_tp=a[0], attn_dp=a[1], moe_tp=e[0], moe_ep=e[1], pp=pp)


#: How ``serve-sim --plan`` reads one engine's layout from each family's plan, keyed by family
#: (:data:`moeplan.planners.families.INSTANCE_SERVED`).
PLAN_LAYOUTS: dict[str, Callable[[Plan], Layout]] = {
    "strategy": _strategy_layout,
    "pipeline": lambda plan: _pipeline_layout(plan.layout),
}
