"""The busiest EP rank's load over the mean, per MoE layer, after the deployment's placement.

Without per-expert loads (a static routing profile) every layer is balanced (1). With them
(a routing trace's counts, :class:`~moeplan.specs.RoutingProfile` ``expert_load``): with
redundant experts the project's EPLB (:func:`moeplan.planners.placement.eplb.rebalance_experts`,
DeepSeek's algorithm: hierarchical when the expert groups split over the nodes) replicates
the hottest experts and packs the ``E + R`` replicas (a replica carries its expert's load
over its replica count); without them the engines' contiguous placement. Times the caller's
factor.

Without per-expert loads the placement is taken as balanced: perfect EPLB, every GPU the same
expected load (the lmsys blog's "simulated perfect EPLB"); the busiest rank of one batch is
then :mod:`moeplan.cost.ep_spread`'s spread alone. Uniform expert popularity is a different
statement: given as a profile of equal per-expert loads, EPLB's ``R`` replicas carry half a
load each and ``(E + R) / ep`` slots per GPU cannot always mix whole and half loads evenly —
DeepSeek-V3 (256 experts, ``R = 32``) at EP72, EP96 or EP144 leaves some GPUs only whole
experts, 1.125x the mean (EP32: 7 whole + 2 halves on every GPU, balanced).
"""

from __future__ import annotations

import numpy as np

from moeplan.planners.placement.eplb import rebalance_experts
from moeplan.serve.layout import ServeLayout
from moeplan.specs import ModelSpec, RoutingProfile


def layer_imbalances(
    route: RoutingProfile, model: ModelSpec, layout: ServeLayout, factor: float, nodes: int
) -> list[float]:
    """Busiest EP rank's load over the mean, per MoE layer (module docstring)."""
    n_moe = len(model.moe_layers)
    if route.expert_load is None or layout.moe_ep <= 1:
        return [factor] * n_moe
    out = []
    for i in range(n_moe):
        row = np.asarray(route.expert_load[i % len(route.expert_load)], float)
        if layout.redundant_experts == 0 or len(row) != model.num_experts:
            out.append(route.imbalance(i, groups=layout.moe_ep) * factor)
            continue
        groups = model.n_group if model.n_group % nodes == 0 else 1
        phy2log, _, logcnt = rebalance_experts(
            row[None, :], len(row) + layout.redundant_experts, groups, nodes, layout.moe_ep
        )
        slot_load = row[phy2log[0]] / logcnt[0][phy2log[0]]
        per_gpu = slot_load.reshape(layout.moe_ep, -1).sum(axis=1)
        out.append(float(per_gpu.max() / per_gpu.mean()) * factor)
    return out
