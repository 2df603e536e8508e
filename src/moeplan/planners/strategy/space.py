"""MixServe strategy space (§III-B1 grammar) and the named baselines (§IV-A, Table II).

A strategy (a :class:`~moeplan.planners.layout.Layout` with one replica) is one derivation
of the grammar for a decoder layer: attention ``(attn_tp, attn_dp)``, MoE ``(moe_tp, moe_ep)``, ``pp`` stages across decoder layers, and
whether the MoE block uses the fused AR-A2A algorithms (§III-D). Every block covers the
``world/pp`` GPUs of a stage: ``attn_tp * attn_dp == moe_tp * moe_ep == world/pp``.

Enumeration: all power-of-two degrees (``any_divisor``: every divisor) of the stage size,
TP innermost. This contains every grammar derivation in which TP is the intra-node kind or
the only kind (``TP8 + DP4``, ``TP8 + EP4``, pure TP, pure DP/EP) and the mixed ones where a
block splits a node (``TP4 + DP8`` = TP4 intra, DP2 intra x DP4 inter, DeepSeek-V3 style).
Departure: derivations that place DP/EP inside a node and TP *across* nodes (TP strided over
the slow link) are not enumerated; their TP all-reduce runs on the inter-node link, which the
Eq. 1-2 model never prefers over the TP-intra mirror image of the same degrees.
The fused variant exists when the MoE TP group is exactly one node of the stage and the EP
group has one rank per node (the layout of Fig. 7/8, which Algorithms 1-2 assume).
"""

from __future__ import annotations

from moeplan.errors import require
from moeplan.planners.layout import Layout


def stage_shape(num_nodes: int, gpus_per_node: int, pp: int) -> tuple[int, int]:
    """(nodes per stage, GPUs per node used by a stage) for ``pp`` stages.

    A stage is whole nodes when ``pp <= num_nodes``, else a slice of one node.
    """
    world = num_nodes * gpus_per_node
    require(world % pp == 0, f"pp ({pp}) must divide the GPU count ({world})")
    stage = world // pp
    return -(-stage // gpus_per_node), min(stage, gpus_per_node)


def degrees(n: int, any_divisor: bool = False) -> list[int]:
    """Allowed degrees dividing ``n``: powers of two (paper rule 9) or every divisor."""
    if any_divisor:
        return [d for d in range(1, n + 1) if n % d == 0]
    out, d = [], 1
    while d <= n:
        if n % d == 0:
            out.append(d)
        d *= 2
    return out


def fusable(s: Layout, num_nodes: int, gpus_per_node: int) -> bool:
    """Whether Algorithms 1-2 apply: MoE TP fills a node, EP has one rank per node."""
    nodes, per_node = stage_shape(num_nodes, gpus_per_node, s.pp)
    return nodes > 1 and s.moe_tp == per_node and s.moe_ep == nodes and s.moe_tp > 1


def enumerate_strategies(
    num_nodes: int, gpus_per_node: int, any_divisor: bool = False
) -> list[Layout]:
    """Every strategy of the grammar on ``num_nodes x gpus_per_node`` GPUs (no feasibility
    filtering: divisibility by the model and memory are checked by the analyzer)."""
    world = num_nodes * gpus_per_node
    out: list[Layout] = []
    for pp in degrees(world, any_divisor):
        stage = world // pp
        for at in degrees(stage, any_divisor):
            for mt in degrees(stage, any_divisor):
                s = Layout(attn_tp=at, attn_dp=stage // at, moe_tp=mt, moe_ep=stage // mt, pp=pp)
                out.append(s)
                if fusable(s, num_nodes, gpus_per_node):
                    out.append(
                        Layout(
                            attn_tp=at,
                            attn_dp=stage // at,
                            moe_tp=mt,
                            moe_ep=stage // mt,
                            pp=pp,
                            fused=True,
                        )
                    )
    return out


def named_baselines(num_nodes: int, gpus_per_node: int) -> dict[str, Layout]:
    """The paper's baselines in the same grammar (Table II), where the cluster allows.

    - ``vllm-tp-pp``: TP = one node, PP = nodes (vLLM TP+PP).
    - ``vllm-dp-ep``: attention TP = node, DP = nodes; MoE EP over every GPU (vLLM DP+EP).
    - ``tutel-tp-ep``: attention TP+DP, MoE TP (node) + EP (nodes), unfused (Tutel).
    - ``deepseek-v3``: attention TP4 + DP(world/4), MoE EP(world) (DeepSeek-V3 prefill).
    """
    g, n = gpus_per_node, num_nodes
    w = g * n
    out = {
        "vllm-tp-pp": Layout(attn_tp=g, attn_dp=1, moe_tp=g, moe_ep=1, pp=n),
        "vllm-dp-ep": Layout(attn_tp=g, attn_dp=n, moe_tp=1, moe_ep=w),
        "tutel-tp-ep": Layout(attn_tp=g, attn_dp=n, moe_tp=g, moe_ep=n),
    }
    if g % 4 == 0 and w > 4:
        out["deepseek-v3"] = Layout(attn_tp=4, attn_dp=w // 4, moe_tp=1, moe_ep=w)
    return out


def mixserve_default(num_nodes: int, gpus_per_node: int) -> Layout:
    """The paper's hybrid: TP = node + DP = nodes, TP = node + EP = nodes, fused (§III-C2)."""
    g, n = gpus_per_node, num_nodes
    return Layout(attn_tp=g, attn_dp=n, moe_tp=g, moe_ep=n, fused=n > 1 and g > 1)
