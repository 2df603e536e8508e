"""Up-front checks of the instance knobs ``plan`` is given, before any planning: a knob that
no layout of the cluster can run is one line and exit 2, not a search that silently drops it."""

from __future__ import annotations

from moeplan.backends import backend_or_none
from moeplan.cost.a2a import deepep_blockers
from moeplan.errors import MoeplanError
from moeplan.serve.iteration.instance_knobs import check_engine_runs
from moeplan.specs import ClusterSpec, ModelSpec


def _ep_sizes(cluster: ClusterSpec) -> list[int]:
    g = cluster.num_gpus
    return [d for d in range(2, g + 1) if g % d == 0]


def check_plan_knobs(
    engine: str | None,
    model: ModelSpec,
    cluster: ClusterSpec,
    *,
    a2a: str | None,
    tbo: bool | None,
) -> None:
    """``--a2a deepep`` / ``--tbo`` need DeepEP on some EP layout (MoE TP 1, every EP size
    dividing the GPU count). Raises one-line :class:`MoeplanError` naming flag, value and
    rule."""
    check_engine_runs(engine, model, cluster)
    sizes = _ep_sizes(cluster)
    b = backend_or_none(engine)
    if tbo and b is not None and (why_tbo := b.tbo_blocker(model.architecture)) is not None:
        raise MoeplanError(f"--tbo cannot run here: {why_tbo}")
    if a2a == "deepep" or tbo:
        why = [deepep_blockers(engine, model, cluster, 1, ep) for ep in sizes] or [
            [f"{cluster.name} has a single GPU (DeepEP needs moe_ep > 1)"]
        ]
        if all(why):
            flag = "--a2a (deepep)" if a2a == "deepep" else "--tbo"
            raise MoeplanError(f"{flag} cannot run on any layout here: {why[-1][0]}")
