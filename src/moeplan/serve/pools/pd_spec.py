"""The command line's spelling of a serving instance's layout (``serve-sim --pd``).

A deployment's one text form is its label (:mod:`moeplan.serve.deployment`, which parses it);
on the command line a LAYOUT may also be written as dot-separated tokens, each a key and its
degree written together, or the word ``fused`` — the same fields, no spaces to quote:

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

e.g. ``--pd 4*attn-dp8.moe-ep8:1*attn-tp2.attn-dp16.moe-ep32`` or
``--pd 3*attn-tp8.moe-tp8:2*ag4.eg12``, the same deployments as
``--pd "4*attn TP1xDP8 / MoE TP1xEP8:1*attn TP2xDP16 / MoE TP1xEP32"`` and
``--pd "3*attn TP8xDP1 / MoE TP8xEP1:2*AFD AG4+EG12"``. Pure: parsing only.
"""

from __future__ import annotations

import re
from typing import Any

from moeplan.errors import MoeplanError, require

#: token key -> Layout field
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
    "moe-rN, ppN, mbN, dense-tpN, fused (or agN.egN for an AFD decode instance), or a label "
    "such as 'attn TP2xDP4 / MoE TP1xEP8' or 'AFD AG4+EG12'"
)


def parse_tokens(text: str, where: str = "--pd") -> tuple[dict[str, Any], dict[str, int]]:
    """The dotted tokens of one LAYOUT (module docstring): ``(layout fields, AFD fields)``;
    one-line :class:`MoeplanError` naming ``where``."""
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
    return fields, afd
