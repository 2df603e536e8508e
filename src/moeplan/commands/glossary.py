"""Plain-words glossary lines for the papers' terms, printed under the tables that use them.

One definition per term (the vocabulary of the design document), so ``dep``, ``place``,
``plan`` and ``pipeline`` explain a term the same way. :func:`glossary` joins the wanted
terms into one "terms: ..." line. Beside them, the families' short names of the table cells
and the line explaining SMIDT's stage choices.
"""

from __future__ import annotations

from collections.abc import Iterable

#: term -> its meaning in plain words (source: the paper that defines it)
TERMS: dict[str, str] = {
    # FinDEP (disaggregated attention / expert GPUs), Sections 3-4
    "ag": "GPUs running attention (the attention group)",
    "eg": "GPUs running the routed experts (the expert group)",
    "ma": "prompts per micro-batch on each attention GPU",
    "r1": "micro-batches in flight per layer, so attention and experts overlap",
    "r2": "chunks each micro-batch's tokens are cut into on the expert side",
    "me": "tokens per expert per chunk",
    "ASAS": "attention order A1 S1 A2 S2 ... (each micro-batch's shared expert right after "
    "its attention)",
    "AASS": "attention order A1 A2 ... S1 S2 ... (all attention first, then the shared experts)",
    "PPPipe": "MegaScale-Infer's ping-pong pipeline (r2 = 1, shared expert inside attention)",
    # Sem-MoE (expert placement), Section 3
    "LAR": "local activation rate: share of routed tokens whose expert sits on the token's "
    "own GPU (higher = less all-to-all traffic)",
    "imbalance": "busiest GPU's expert load / mean load (1.0 = perfectly even)",
    "balancedness": "SGLang's mean / max expert load (1.0 = perfectly even)",
    "a2a": "all-to-all bytes per MoE layer and step",
    # SMIDT (pipelines), Section 3
    "DPMoE": "copies of an MoE module kept in spare memory, shrinking its all-to-all group",
    # MixServe (hybrid parallel strategies), Section III
    "TP": "tensor parallel: each weight matrix split over that many GPUs",
    "DP": "data parallel: that many copies, each serving its own requests",
    "EP": "expert parallel: the routed experts spread over that many GPUs",
    "PP": "pipeline parallel: the layers cut into that many stages",
    "fused": "MixServe's fused RS-Combine / AG-Dispatch, the inter-node all-to-all overlapped "
    "with the intra-node collectives",
    # serving families
    "P/D": "prefill and decode on separate pools of GPUs, the KV cache sent between them",
    "AFD": "attention-FFN disaggregated decode: FinDEP's schedule each decode step",
}


def glossary(*terms: str) -> str:
    """``terms: ma = ...; r1 = ...`` for ``terms`` in the order given (unknown: KeyError)."""
    return "terms: " + "; ".join(f"{t} = {TERMS[t]}" for t in terms) + "."


#: the families' names in table cells: what the deployment is, in the engines' words; the
#: paper behind each (MixServe, SMIDT, FinDEP) is named once in the legend under the table
#: (:func:`family_legend`, from the long names ``FAMILY_NAMES``)
FAMILY_SHORT_NAMES = {
    "strategy": "colocated",
    "pipeline": "pipelined",
    "dep": "attn/expert split",
    "pd": "P/D",
    "afd": "AFD",
}


def family_legend(families: Iterable[str]) -> str:
    """``families: P/D = ...; MixServe = ....``: each family of a table's rows (in their order)
    with its meaning in one line, and the terms of attention/expert group labels (AG, EG)
    when a family laid out in groups is among them."""
    from moeplan.planners.families import FAMILY
    from moeplan.planners.rank import FAMILY_NAMES

    fams = list(dict.fromkeys(families))
    names = "; ".join(f"{FAMILY_SHORT_NAMES.get(f, f)} = {FAMILY_NAMES[f]}" for f in fams)
    groups = any(f in FAMILY and FAMILY[f].layout == "groups" for f in fams)
    return f"families: {names}." + (f" {glossary('ag', 'eg')}" if groups else "")


#: what the ``choices`` column's letters mean (SMIDT's module choice, Section 3)
PIPELINE_CHOICES = (
    "choices: per run of layers, t = tensor-parallel degree inside the module, e = expert-"
    "parallel degree (MoE), d = data-parallel copies (attention DP; for an MoE module "
    "SMIDT's DPMoE: replicas kept in spare memory, shrinking its all-to-all); bottleneck = "
    "the slowest stage's time, which sets the pipeline's pace."
)


#: ``--routing-trace`` names a routing trace (.parquet/.npz) on every command that reads one
#: (plan, place, serve-sim, pipeline); plan and place also take ``--trace``, its older name.
PLAN_TRACE_HELP = "Routing trace (.parquet/.npz) for Sem-MoE placement (--trace: its older name)."
PLACE_TRACE_HELP = "Routing trace (.parquet or .npz; --trace: its older name)."
