"""Why the cluster's NVLink domain helps or costs the winner per GPU, in one sentence.

The winner's widest expert-parallel group exchanges tokens by all-to-all every MoE layer:
dispatch (fp8, one byte per hidden value) and combine (bf16) of :data:`A2A_TOKENS` tokens per
rank routed to ``top_k`` experts. :func:`topology_sentence` prices that exchange with the
plan's own cost model twice: on the cluster as it is, and on its counterpart — the same GPUs
and links with the other NVLink domain:

- a rack cluster (GB200 / GB300 NVL72, one NVLink domain of 72 GPUs across trays of 4)
  against NVLink domains of :data:`HGX_DOMAIN` GPUs (an HGX / DGX server), where a group past
  8 ranks crosses the network;
- a cluster of servers (B200 / B300 nodes of 8) against all its GPUs in one NVLink domain
  (as on an NVL72 rack), when that domain is one NVLink 5 switches can build.

The sentence names the link each side runs on, the time of one layer's exchange and of a
whole decode step's (every MoE layer), so the per-GPU difference of the ranking is read off it.
"""

from __future__ import annotations

from dataclasses import replace

from moeplan.cost import CostModel
from moeplan.specs import ClusterSpec, ModelSpec
from moeplan.specs.cluster import MAX_DOMAIN

#: tokens per rank of the priced exchange: DeepEP's low-latency (decode) kernels are sized for
#: ``num_max_dispatch_tokens_per_rank`` = 128 by default (deepseek-ai/DeepEP README, low-latency
#: example; SGLang's SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK default 128)
A2A_TOKENS = 128
#: GPUs of the NVLink domain of an HGX / DGX B200 or B300 server (NVIDIA HGX datasheets: 8
#: GPUs behind NVLink switches)
HGX_DOMAIN = 8


def counterpart(c: ClusterSpec) -> tuple[ClusterSpec, str] | None:
    """The same GPUs and links with the other NVLink domain, and how to name it (``None``:
    the cluster has no counterpart — one node, or more GPUs than one domain can hold)."""
    if c.mnnvl:
        if c.num_gpus % HGX_DOMAIN:
            return None
        other = replace(
            c, gpus_per_node=HGX_DOMAIN, num_nodes=c.num_gpus // HGX_DOMAIN, domain_gpus=None
        )
        return other, f"NVLink domains of {HGX_DOMAIN} GPUs (an HGX server)"
    if c.num_domains <= 1 or c.num_gpus > MAX_DOMAIN:
        return None
    other = replace(c, domain_gpus=c.num_gpus)
    return other, f"all {c.num_gpus} GPUs in one NVLink domain (as on an NVL72 rack)"


def exchange_s(cm: CostModel, model: ModelSpec, ep: int) -> tuple[float, bool]:
    """Seconds of one MoE layer's dispatch + combine over ``ep`` ranks on ``cm``'s cluster,
    and whether it crosses the network: DeepEP's low-latency kernels as the wide-EP price
    reads them (:mod:`moeplan.cost.wideep`, with the fewest redundant experts that split
    evenly over ``ep``: 32 at EP48 / EP72 of 256, as SGLang's GB200 deployment) where the
    cost model has an engine's tables, the all-to-all formula
    (:mod:`moeplan.cost.collectives`) otherwise."""
    domains = cm.cluster.domains_spanned(ep)
    wide = cm.wide_ep
    if wide is not None:
        w = wide.moe(model, A2A_TOKENS, ep, redundant=-model.num_experts % ep, phase="generation")
        return w.dispatch + w.combine, domains > 1
    per_rank = A2A_TOKENS * model.top_k * model.hidden_size
    t = cm.collective("all_to_all", per_rank * 1.0, ep, domains)  # dispatch: fp8
    t += cm.collective("all_to_all", per_rank * 2.0, ep, domains)  # combine: bf16
    return t, domains > 1


def _link(c: ClusterSpec, network: bool) -> str:
    if network:
        return f"the network ({c.inter.kind}, {c.inter.bw / 1e9:.0f} GB/s per GPU)"
    return f"NVLink ({c.intra.bw / 1e9:.0f} GB/s per GPU)"


def topology_sentence(cm: CostModel, model: ModelSpec, ep: int) -> str | None:
    """The sentence (module docstring), or ``None`` for a model without experts, a winner
    without expert parallelism, or a cluster without a counterpart."""
    c = cm.cluster
    other = counterpart(c)
    if model.num_experts <= 1 or ep <= 1 or other is None:
        return None
    alt, alt_name = other
    here = (
        f"{c.name}: one NVLink domain of {c.nvlink_domain} GPUs over trays of {c.gpus_per_node}"
        if c.mnnvl
        else f"{c.name}: NVLink domains of {c.nvlink_domain} GPUs"
    )
    t, net = exchange_s(cm, model, ep)
    t_alt, net_alt = exchange_s(CostModel(alt, cm.profile, cm.engine, cm._kdb), model, ep)
    layers = model.num_moe_layers
    ratio = t_alt / t if t > 0 else 1.0
    return (
        f"Topology: {here}. The winner's EP{ep} all-to-all (dispatch + combine of "
        f"{A2A_TOKENS} tokens per rank) runs over {_link(c, net)}: {t * 1e6:,.0f} us per MoE "
        f"layer, {t * layers * 1e3:.2f} ms per decode step ({layers} MoE layers); with "
        f"{alt_name} it would run over {_link(alt, net_alt)}: {t_alt * 1e6:,.0f} us per layer, "
        f"{t_alt * layers * 1e3:.2f} ms per step ({_verdict(net, net_alt, ratio)})."
        + _wider(cm, alt, model, ep)
    )


def _verdict(net: bool, net_alt: bool, ratio: float) -> str:
    if net == net_alt:
        return "the same link"
    if ratio >= 1:
        return f"{ratio:.2f}x longer there"
    return f"{1 / ratio:.2f}x shorter there"


def _wider(cm: CostModel, alt: ClusterSpec, model: ModelSpec, ep: int) -> str:
    """When the winner's group runs on the same link on both sides, what the next wider
    group (twice the ranks, within the cluster) costs on each: why the cluster of servers
    keeps its decode group inside the node, or why the rack's wider one pays (empty when
    no wider group fits or both sides still share a link)."""
    c, wide = cm.cluster, 2 * ep
    if wide > c.num_gpus or c.domains_spanned(ep) != 1 or alt.domains_spanned(ep) != 1:
        return ""
    t, net = exchange_s(cm, model, wide)
    t_alt, net_alt = exchange_s(CostModel(alt, cm.profile, cm.engine, cm._kdb), model, wide)
    if net == net_alt:
        return ""
    layers = model.num_moe_layers
    return (
        f" An EP{wide} group would run over {_link(c, net)} here, {t * layers * 1e3:.2f} ms "
        f"per step, against {t_alt * layers * 1e3:.2f} ms over {_link(alt, net_alt)} there "
        f"({_verdict(net, net_alt, t_alt / t if t > 0 else 1.0)})."
    )
