"""What ``serve-sim --plan`` simulates: exactly the deployment ``moeplan plan`` served.

A ``plan.json`` written by ``moeplan plan`` records, under ``predicted.serving``, the instance
it served (``serve_layout``: every degree, redundant experts, fusion, micro-batches), how
many ``replicas`` of it, the instance ``knobs`` (all-to-all backend, two-batch overlap, KV
dtype) and the engine settings the capacity search chose (``engine.chunk_tokens``,
``engine.max_running``). :func:`served_deployment` reads them back, so the simulation repeats
the plan's own and its figures match. A plan without that record (written by ``strategy`` or
``pipeline``) is read from its layout alone (:func:`moeplan.cli.serve.layout_from_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moeplan.errors import MoeplanError, check_int
from moeplan.planners.plan import Plan
from moeplan.serve.layout import ServeLayout

LAYOUT_KEYS = ("attn_tp", "attn_dp", "moe_tp", "moe_ep", "pp", "micro_batches", "dense_tp",
               "redundant_experts", "fused")
MAX_REPLICAS = 1 << 20  # far beyond any cluster preset's GPUs (specs/cluster.py bounds)


@dataclass(frozen=True, kw_only=True)
class ServedDeployment:
    """The colocated deployment a plan's serving prediction was made on."""

    layout: ServeLayout
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
        layout = ServeLayout(**{k: lay[k] for k in LAYOUT_KEYS if k in lay})
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
