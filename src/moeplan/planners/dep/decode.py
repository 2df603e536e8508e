"""FinDEP for decode iterations: the AG/EG split applied to one decode step.

MegaScale-Infer and Step-3 disaggregate attention and FFN for *decode*; FinDEP's task graph
(§3.2), durations (Eqs. 1–4, 7–11) and Algorithm 1 (§4.3) apply unchanged once a "sample"
is one decoding sequence contributing one token:

- ``seq_len = 1``: ``ma`` sequences per micro-batch per AG GPU are ``ma`` tokens; every AG
  GPU runs the whole attention of its sequences (attention DP over the AG, TP 1).
- ``t_a(ma)``: one attention layer of ``ma`` one-token queries over ``ctx`` keys each (the
  KV read dominates: :meth:`CostModel.attention_layer`) plus the router GEMM.
- ``t_s(ma)``: the shared experts over ``ma`` tokens; dense layers: attention + dense MLP.
- ``me = ma·ag·top_k/(r2·E)`` tokens per expert per chunk (times ``imbalance``); ``t_e``,
  ``t_a2e = t_e2a`` as for prefill (:func:`moeplan.planners.dep.problem.dep_problem`).
- ``batch``: the decode batch per AG GPU this iteration (Algorithm 1's ``B``): ``r1·ma <=
  batch``. Departure from the prefill instance: memory does not cap ``r1`` — the KV cache of
  every running sequence is resident whatever the micro-batching (the serving engine's KV
  pool, sized by :func:`ag_kv_tokens`, admits them), so only the batch caps ``r1·ma``.

§4.3's online phase re-solves per arriving shape: :mod:`moeplan.serve.pools.afd` calls
:func:`moeplan.planners.dep.solver.solve` per bucketed ``(batch, ctx)`` of the serving
simulation, memoised.
"""

from __future__ import annotations

import math
from functools import lru_cache

from moeplan.cost import CostModel
from moeplan.cost import memory as mem
from moeplan.errors import MoeplanError, require
from moeplan.planners.dep.problem import DepProblem, _MemoryModel
from moeplan.planners.dep.schedule import DepTimes
from moeplan.specs import ClusterSpec, ModelSpec
from moeplan.units import GIB

#: Chunks per micro-batch tried in decode: ``me`` is a few tokens per expert, so more
#: chunks only add per-chunk latency (a cap for the online solve's speed, not a rule).
DECODE_R2_MAX = 8


def check_fits(model: ModelSpec, cluster: ClusterSpec, ag: int, eg: int) -> _MemoryModel:
    """The weights' memory model of ``ag + eg``; raises :class:`MoeplanError` when a side's
    weights alone do not fit one GPU."""
    require(ag >= 1 and eg >= 1, f"ag ({ag}) and eg ({eg}) must both be >= 1")
    require(
        model.num_moe_layers >= 1,
        f"model {model.name} with {model.num_layers} layers has no MoE layer",
    )
    local = math.ceil(model.num_experts / eg)
    mm = _MemoryModel(model=model, ag=ag, eg=eg, seq_len=1, local=local, imbalance=1.0)
    cap = mem.usable_bytes(cluster.gpu.mem_bytes)
    for side, fixed in (("EG", mm.eg_weights), ("AG", mm.ag_weights)):
        if fixed > cap:
            raise MoeplanError(
                f"model {model.name} does not fit the {side}: weights need {fixed / GIB:.1f} GiB "
                f"per {side} GPU (ag={ag}, eg={eg}), each {cluster.gpu.name} has "
                f"{cap / GIB:.1f} GiB usable"
            )
    return mm


def ag_kv_tokens(model: ModelSpec, cluster: ClusterSpec, ag: int, eg: int, batch: int) -> int:
    """KV tokens one AG GPU holds next to its weights, the activations and A2E/E2A buffers of
    ``batch`` decode tokens, the length-independent cache of its ``batch`` sequences (linear
    layers' state) and the reserve (raises when the weights do not fit)."""
    mm = check_fits(model, cluster, ag, eg)
    per_token = mem.kv_bytes_per_token_layer(model) * model.num_layers
    used = (
        mm.ag_weights
        + mem.activation_bytes(model, batch)
        + mem.a2a_buffer_bytes(model, batch, model.top_k)
        + batch * mem.fixed_bytes_per_seq(model)
        + mem.RESERVED_BYTES
    )
    return max(0, int((cluster.gpu.mem_bytes - used) // per_token))


def decode_problem(
    model: ModelSpec,
    cluster: ClusterSpec,
    cm: CostModel,
    *,
    ag: int,
    eg: int,
    batch: int,
    ctx: int,
    imbalance: float = 1.0,
    r2_max: int = DECODE_R2_MAX,
) -> DepProblem:
    """The FinDEP instance of one decode iteration: ``batch`` sequences per AG GPU at mean
    context ``ctx`` keys (module docstring). Raises :class:`MoeplanError` on bad input."""
    require(batch >= 1, f"batch ({batch}) must be >= 1")
    require(ctx >= 1, f"ctx ({ctx}) must be >= 1")
    require(imbalance >= 1.0, f"imbalance ({imbalance}) must be >= 1")
    require(
        ag + eg <= cluster.num_gpus,
        f"ag + eg ({ag} + {eg} = {ag + eg}) must be <= the cluster's GPUs ({cluster.num_gpus})",
    )
    mm = check_fits(model, cluster, ag, eg)
    local = mm.local
    per_exp = ag * model.top_k / model.num_experts

    @lru_cache(maxsize=1024)
    def ag_side(ma: int) -> tuple[float, float, float]:
        attn = cm.attention_layer(model, ma, 1, ctx)
        return (
            attn + cm.router(model, ma),
            cm.shared_expert(model, ma),
            attn + cm.dense_mlp(model, ma),
        )

    @lru_cache(maxsize=4096)
    def eg_side(me: float) -> tuple[float, float]:
        return cm.expert_ffn(model, me, local), cm.a2e(me * local * model.hidden_bytes, ag, eg)

    def times(ma: int, r2: int) -> DepTimes:
        attn, shared, dense = ag_side(ma)
        expert, comm = eg_side(ma * per_exp / r2 * imbalance)
        return DepTimes(attn=attn, shared=shared, expert=expert, a2e=comm, e2a=comm, dense=dense)

    return DepProblem(
        ag=ag,
        eg=eg,
        seq_len=1,
        layers=model.num_moe_layers,
        dense_layers=model.num_layers - model.num_moe_layers,
        batch=batch,
        r2_max=r2_max,
        times=times,
        max_r1=lambda ma: 0 if ma < 1 else batch // ma,
        me_per_ma=per_exp,
        label=f"{model.name}@{cluster.name} decode b={batch} ctx={ctx}",
        prefetch=lambda pairs: _prefetch(cm, model, ctx, local, per_exp, imbalance, pairs),
    )


def _prefetch(
    cm: CostModel, model: ModelSpec, ctx: int, local: float, per_exp: float, imbalance: float,
    pairs: list[tuple[int, int]],
) -> None:  # fmt: skip
    """The kernel-table prices a solve may ask, in one vectorised pass per table
    (:mod:`moeplan.cost.prefetch`): the expert loads of :func:`decode_problem`'s ``eg_side``
    and the attention cores of its ``ag_side`` (the same arguments, so the same answers)."""
    cm.warm_expert_ffn(model, sorted({ma * per_exp / r2 * imbalance for ma, r2 in pairs}), local)
    cm.warm_attention_core(model, sorted({ma for ma, _ in pairs}), 1, ctx)
