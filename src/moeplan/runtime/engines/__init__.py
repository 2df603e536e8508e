"""Engines: one registry from plan family to the engine that runs it.

=============  =================================================================================
family         engine
=============  =================================================================================
``ep``         :mod:`.ep` — attention DP, MoE EP all-to-all (optional Sem-MoE/EPLB placement)
``strategy``   :mod:`.hybrid` — MixServe hybrid TP-EP with fused collectives; :mod:`.tp_ep` when
               ``attn.tp = moe.ep = world`` (Sem-MoE's shuffled RS/AG); ``pp > 1`` runs as even
               pipeline stages on :mod:`.pp` (:func:`moeplan.runtime.mesh.strategy_as_pipeline`)
``pipeline``   :mod:`.pp` — SMIDT stages with per-module TP/EP/DPMoE, sync or async sends
``dep``        :mod:`.dep` — FinDEP attention/expert groups with fine-grained pipelining
=============  =================================================================================

Every family of :data:`moeplan.planners.families.PLAN_FAMILIES` has an entry (a test checks it). The
engines apply their parallel layout to the one layer loop
(:func:`moeplan.runtime.layers.decoder.forward`); DEP's attention ranks run one such loop per
micro-batch and advance them in FinDEP's interleaved order
(:func:`~moeplan.runtime.layers.decoder.steps`); its expert ranks serve chunks in arrival order.
"""

from __future__ import annotations

from collections.abc import Callable

from moeplan.runtime.config import MoEConfig
from moeplan.runtime.engines import dep, ep, hybrid, pp, tp_ep
from moeplan.runtime.engines.base import Engine, RunContext, with_layers
from moeplan.runtime.mesh import Mesh, strategy_as_pipeline

EngineFactory = Callable[[Mesh, MoEConfig], Engine]


def build_strategy(mesh: Mesh, cfg: MoEConfig) -> Engine:
    """MixServe strategy plans: PP across decoder layers, Sem-MoE attention TP, or hybrid."""
    if mesh.pp > 1:  # PP across decoder layers: the pipeline engine
        cfg = with_layers(cfg, max(cfg.num_layers, mesh.pp), ())
        return pp.build(strategy_as_pipeline(mesh, cfg.num_layers), cfg)
    if tp_ep.is_tp_ep(mesh):
        return tp_ep.build(mesh, cfg)
    return hybrid.build(mesh, cfg)


FAMILY_ENGINES: dict[str, EngineFactory] = {
    "ep": ep.build,
    "strategy": build_strategy,
    "pipeline": pp.build,
    "dep": dep.build,
}


def engine_for(mesh: Mesh, cfg: MoEConfig) -> Engine:
    """Build (and validate) the engine of ``mesh.family`` for model ``cfg``."""
    return FAMILY_ENGINES[mesh.family](mesh, cfg)


__all__ = [
    "FAMILY_ENGINES",
    "Engine",
    "EngineFactory",
    "RunContext",
    "build_strategy",
    "engine_for",
]
