"""Which decoder-layer mixers the cost model prices as their own kind, and which by a stand-in.

The cost model prices attention through its uniform attention path: full attention (MHA /
GQA / MQA) and MLA from their measured tables, sliding-window and chunked layers with the
context capped at the window or chunk. With an engine's kernel tables
(:meth:`moeplan.cost.model.CostModel.mixer_layer`), the other mixer kinds of
:mod:`moeplan.specs.layers` get their own prices (:data:`moeplan.cost.mixers.TABLE_MIXER_KINDS`:
DSA, CSA / HCA, MSA modules, Gated DeltaNet, KDA, Mamba-2) and a block without a mixer
(``none``) costs nothing. Without tables (``--cost-engine none``: the fitted profile) those
kinds are priced by the uniform path with the model's attention shape — a stand-in that
:func:`stand_in_note` names wherever a plan's figures are printed.
"""

from __future__ import annotations

from moeplan.cost.mixers import TABLE_MIXER_KINDS
from moeplan.specs import ModelSpec

#: mixer kinds every cost model prices as their own kind
PRICED_MIXERS = ("mha", "mla", "swa", "chunked")
#: and those priced as their own kind when the cost model has an engine's kernel tables
PRICED_WITH_TABLES = (*PRICED_MIXERS, *TABLE_MIXER_KINDS, "none")


def stand_ins(model: ModelSpec, with_tables: bool = False) -> dict[str, int]:
    """Layers per mixer kind priced by the uniform attention path as a stand-in."""
    priced = PRICED_WITH_TABLES if with_tables else PRICED_MIXERS
    out: dict[str, int] = {}
    for x in model.layer_specs:
        if x.mixer.kind not in priced:
            out[x.mixer.kind] = out.get(x.mixer.kind, 0) + 1
    return out


def stand_in_note(model: ModelSpec, with_tables: bool = False) -> str | None:
    """One line naming the stand-in-priced layers (``None`` when there are none)."""
    kinds = stand_ins(model, with_tables)
    if not kinds:
        return None
    shape = "MLA" if model.attention == "mla" else "GQA"
    listed = ", ".join(f"{k} x{n}" for k, n in kinds.items())
    return (f"layer prices: {listed} priced as the model's {shape} attention "
            f"({model.num_attention_heads} heads) — a stand-in: their own prices need an "
            "engine's kernel tables (--cost-engine sglang/vllm)")  # fmt: skip


def stand_in_fields(model: ModelSpec, with_tables: bool = False) -> dict[str, object]:
    """The JSON fields of a pricing record: stand-in layers per kind and the line."""
    return {"stand_ins": stand_ins(model, with_tables),
            "stand_in_note": stand_in_note(model, with_tables)}  # fmt: skip
