"""The colocated deployment space: replicas x instance.

An instance is attention TP x DP and MoE TP x EP over the same ``W`` GPUs per pipeline stage,
``pp`` stages (one micro-batch per stage, the engines' default), ``W x pp`` GPUs in all,
possibly spanning nodes. Instance sizes are the powers of two up to the cluster (the degrees
MixServe's grammar and the engines' launchers use) and the cluster's own GPU count; every
factorisation of ``W`` into ``attn_tp x attn_dp`` and into ``moe_tp x moe_ep`` is listed.
A deployment is ``replicas = cluster GPUs // instance GPUs`` copies fed round-robin; a
remainder of GPUs is stated (:func:`copies`), never silently dropped.

Layouts the model cannot be cut into (heads, experts or MoE width not divisible, more stages
than layers) are left out here; layouts whose weights do not fit are found by the engine
configuration (:func:`moeplan.serve.knobs.engine_config`) and reported as infeasible.
"""

from __future__ import annotations

from moeplan.errors import MoeplanError
from moeplan.serve.layout import ServeLayout
from moeplan.specs import ClusterSpec, ModelSpec


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def instance_sizes(cluster: ClusterSpec) -> list[int]:
    """Powers of two up to the cluster's GPUs, and the cluster's GPU count."""
    n = cluster.num_gpus
    out = {n}
    k = 1
    while k <= n:
        out.add(k)
        k *= 2
    return sorted(out)


def layouts(model: ModelSpec, cluster: ClusterSpec) -> list[ServeLayout]:
    """Every instance layout of the space (module docstring) the model can be cut into."""
    out: list[ServeLayout] = []
    for g in instance_sizes(cluster):
        for pp in _divisors(g):
            w = g // pp
            for attn_tp in _divisors(w):
                for moe_tp in _divisors(w):
                    try:
                        lay = ServeLayout(
                            attn_tp=attn_tp,
                            attn_dp=w // attn_tp,
                            moe_tp=moe_tp,
                            moe_ep=w // moe_tp,
                            pp=pp,
                        )
                        out.append(lay.validate(model, cluster))
                    except MoeplanError:
                        continue
    return out


def copies(cluster: ClusterSpec, layout: ServeLayout) -> tuple[int, int]:
    """Replicas of ``layout`` that fit the cluster and the GPUs left over."""
    return cluster.num_gpus // layout.gpus, cluster.num_gpus % layout.gpus
