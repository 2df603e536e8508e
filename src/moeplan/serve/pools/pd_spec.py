"""The text form of a P/D deployment: ``X*LAYOUT:Y*LAYOUT`` (``serve-sim --pd``).

``X`` prefill instances of the first layout, ``Y`` decode instances of the second
(:class:`moeplan.serve.pools.pd.PDLayout`). A LAYOUT is dot-separated tokens, each a key and its
degree written together, or the word ``fused``:

==============  ========================================================  ========
token           meaning                                                   omitted
==============  ========================================================  ========
``attn-tpN``    attention tensor-parallel degree                          1
``attn-dpN``    attention data-parallel degree (DP attention)             1
``moe-tpN``     tensor parallelism inside each expert                     1
``moe-epN``     expert-parallel degree                                    1
``moe-rN``      redundant experts (EPLB replicas) over the EP group       0
``ppN``         pipeline stages                                           1
``mbN``         micro-batches of a pipeline                               ``pp``
``dense-tpN``   TP of the dense MLP layers                                attn TP
``fused``       MixServe's fused AR-A2A (MoE TP = node, EP = nodes)       off
``agN.egN``     an attention-FFN disaggregated decode instance (AFD):     —
                ``N`` attention GPUs and ``N`` expert GPUs (decode only)
==============  ========================================================  ========

e.g. ``4*attn-dp8.moe-ep8:1*attn-tp2.attn-dp16.moe-ep32`` or ``3*attn-tp8.moe-tp8:2*ag4.eg12``.
``attn_tp * attn_dp`` must equal ``moe_tp * moe_ep`` (the layout's own rule).
:func:`layout_text` writes a layout back in this grammar. A P/D ``plan.json`` carries the
same deployment as ``details.disaggregation`` (:func:`pd_from_dict`). Pure: parsing only.
"""

from __future__ import annotations

import re
from typing import Any

from moeplan.errors import MoeplanError, require
from moeplan.serve.layout import ServeLayout
from moeplan.serve.pools.afd import AFDLayout
from moeplan.serve.pools.pd import DecodeLayout, PDLayout

#: token key -> ServeLayout field
KEYS = {
    "attn-tp": "attn_tp",
    "attn-dp": "attn_dp",
    "moe-tp": "moe_tp",
    "moe-ep": "moe_ep",
    "moe-r": "redundant_experts",
    "pp": "pp",
    "mb": "micro_batches",
    "dense-tp": "dense_tp",
}
AFD_KEYS = {"ag": "ag", "eg": "eg"}
_TOKEN = re.compile(r"([a-z][a-z-]*?)(\d+)")
GRAMMAR = (
    "X*LAYOUT:Y*LAYOUT, LAYOUT = dot-separated attn-tpN, attn-dpN, moe-tpN, moe-epN, "
    "moe-rN, ppN, mbN, dense-tpN, fused (or agN.egN for an AFD decode instance)"
)


def parse_layout(text: str, where: str = "--pd") -> ServeLayout | AFDLayout:
    """One LAYOUT (module docstring); one-line :class:`MoeplanError` naming ``where``."""
    fields: dict[str, Any] = {}
    afd: dict[str, int] = {}
    for tok in text.strip().split("."):
        if tok == "fused":
            fields["fused"] = True
            continue
        m = _TOKEN.fullmatch(tok)
        key = m.group(1) if m else None
        if m is None or (key not in KEYS and key not in AFD_KEYS):
            raise MoeplanError(f"{where} layout ({text!r}): token {tok!r} is not in {GRAMMAR}")
        into, name = (afd, AFD_KEYS[key]) if key in AFD_KEYS else (fields, KEYS[key])  # type: ignore[index]
        require(name not in into, f"{where} layout ({text!r}): {key} given twice")
        into[name] = int(m.group(2))
    if afd:
        require(
            not fields and set(afd) == {"ag", "eg"},
            f"{where} layout ({text!r}): an AFD instance is exactly agN.egN",
        )
        return AFDLayout(**afd)
    require(bool(fields), f"{where} layout ({text!r}) is empty; the grammar is {GRAMMAR}")
    try:
        return ServeLayout(**fields)
    except MoeplanError as err:
        raise MoeplanError(f"{where} layout ({text!r}): {err}") from None


def parse_pd(text: str, where: str = "--pd") -> PDLayout:
    """``X*LAYOUT:Y*LAYOUT`` -> :class:`PDLayout` (module docstring)."""
    parts = text.strip().split(":")
    require(len(parts) == 2, f"{where} ({text!r}) must be {GRAMMAR}")
    pools = []
    for role, part in zip(("prefill", "decode"), parts, strict=True):
        count, star, lay = part.partition("*")
        require(
            star == "*" and count.strip().isdigit() and int(count) >= 1,
            f"{where} {role} pool ({part!r}) must be X*LAYOUT with X a positive integer",
        )
        pools.append((int(count), parse_layout(lay, f"{where} {role}")))
    (x, pre), (y, dec) = pools
    require(
        isinstance(pre, ServeLayout),
        f"{where} prefill layout ({parts[0]!r}) must be a colocated layout, not an AFD instance",
    )
    return PDLayout(prefill=pre, decode=dec, x=x, y=y)  # type: ignore[arg-type]


def layout_text(layout: ServeLayout | AFDLayout) -> str:
    """``layout`` in the grammar (degrees of 1 and defaults left out)."""
    if isinstance(layout, AFDLayout):
        return f"ag{layout.ag}.eg{layout.eg}"
    default = {"micro_batches": layout.pp, "dense_tp": layout.attn_tp, "redundant_experts": 0}
    toks = [
        f"{k}{getattr(layout, f)}"
        for k, f in KEYS.items()
        if getattr(layout, f) != default.get(f, 1)
    ]
    toks += ["fused"] if layout.fused else []
    return ".".join(toks) or "attn-tp1"


def pd_text(pd: PDLayout) -> str:
    return f"{pd.x}*{layout_text(pd.prefill)}:{pd.y}*{layout_text(pd.decode)}"


def _from_fields(d: dict[str, Any], where: str) -> ServeLayout | AFDLayout:
    if d.get("kind") == "afd":
        return AFDLayout(ag=int(d["ag"]), eg=int(d["eg"]))
    names = (*KEYS.values(), "fused")
    return ServeLayout(**{k: d[k] for k in names if k in d})


def pd_from_dict(d: Any, where: str = "plan.details.disaggregation") -> PDLayout:
    """The deployment of a P/D ``plan.json`` (``details.disaggregation``, as written by
    :meth:`PDLayout.to_dict`)."""
    require(isinstance(d, dict), f"{where} must be an object with prefill and decode pools")
    try:
        pre = _from_fields(d["prefill"], where)
        dec: DecodeLayout = _from_fields(d["decode"], where)  # type: ignore[assignment]
        x, y = int(d["prefill"]["instances"]), int(d["decode"]["instances"])
    except (KeyError, TypeError, ValueError) as err:
        raise MoeplanError(f"{where} is malformed: {type(err).__name__}: {err}") from None
    require(isinstance(pre, ServeLayout), f"{where}.prefill must be a colocated layout")
    return PDLayout(prefill=pre, decode=dec, x=x, y=y)  # type: ignore[arg-type]
