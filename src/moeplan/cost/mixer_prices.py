"""Which decoder-layer mixers the cost model prices as their own kind, and which by a stand-in.

The cost model prices attention through its uniform attention path: full attention (MHA /
GQA / MQA) and MLA from their measured tables, sliding-window and chunked layers with the
context capped at the window or chunk. Every other mixer kind of
:mod:`moeplan.specs.layers` (DSA, CSA / HCA, Gated DeltaNet, KDA, Mamba-2, MSA, and the
mixer-less blocks ``none``) is priced by that same path with the model's attention shape
until its own price is wired in — a stand-in that :func:`stand_in_note` names wherever a
plan's figures are printed. A kind joins :data:`PRICED_MIXERS` with its price.
"""

from __future__ import annotations

from moeplan.specs import ModelSpec

#: mixer kinds priced as their own kind (extend when a kind gets its tables)
PRICED_MIXERS = ("mha", "mla", "swa", "chunked")


def stand_ins(model: ModelSpec) -> dict[str, int]:
    """Layers per mixer kind priced by the uniform attention path as a stand-in."""
    out: dict[str, int] = {}
    for x in model.layer_specs:
        if x.mixer.kind not in PRICED_MIXERS:
            out[x.mixer.kind] = out.get(x.mixer.kind, 0) + 1
    return out


def stand_in_note(model: ModelSpec) -> str | None:
    """One line naming the stand-in-priced layers (``None`` when there are none)."""
    kinds = stand_ins(model)
    if not kinds:
        return None
    shape = "MLA" if model.attention == "mla" else "GQA"
    listed = ", ".join(f"{k} x{n}" for k, n in kinds.items())
    return (f"layer prices: {listed} priced as the model's {shape} attention "
            f"({model.num_attention_heads} heads) — a stand-in until their measured tables "
            "are wired; their time is not measured")  # fmt: skip


def stand_in_fields(model: ModelSpec) -> dict[str, object]:
    """The JSON fields of a pricing record: stand-in layers per kind and the line."""
    return {"stand_ins": stand_ins(model), "stand_in_note": stand_in_note(model)}
