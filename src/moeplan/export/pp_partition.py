"""A SMIDT pipeline's stage cuts as the engines' layer partition (pure).

SMIDT cuts the ``2N`` modules ``[attn_0, ffn_0, …, attn_{N-1}, ffn_{N-1}]`` (paper 001,
§4); the engines cut whole decoder layers (SGLang ``SGLANG_PP_LAYER_PARTITION``, vLLM
``VLLM_PP_LAYER_PARTITION``: layers per stage, each backend's ``pp_partition_env``). A stage
ending at an even module index ``b`` is the layer cut ``b / 2``. A stage ending at an odd
index cuts *inside* layer ``(b - 1) / 2`` (its attention in one stage, its FFN in the next),
which no engine can express: the nearest layer-level cut moves that one module to the
neighbouring stage with the smaller predicted stage time (``details.stage_time_s`` of the
pipeline plan), and the note says so. The moved module's time is not re-priced here: the
exported partition's stage times differ from the plan's by that module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def layer_partition(
    stages: Sequence[dict[str, Any]], stage_times: Sequence[float] | None = None
) -> tuple[tuple[int, ...], list[str]]:
    """Layers per stage of ``stages`` (``plan.json`` ``layout.stages``: ``start_module``,
    ``end_module`` exclusive) and the notes on cuts that fell inside a layer."""
    ends = [int(s["end_module"]) for s in stages]
    total = ends[-1] // 2 + ends[-1] % 2
    cuts, notes = [], []
    for j, b in enumerate(ends[:-1]):
        if b % 2 == 0:
            cuts.append(b // 2)
            continue
        layer = (b - 1) // 2
        left = stage_times[j] if stage_times else 0.0
        right = stage_times[j + 1] if stage_times else 0.0
        cut = layer + 1 if left <= right else layer  # the FFN joins the lighter stage
        who = f"stage {j}" if cut == layer + 1 else f"stage {j + 1}"
        notes.append(
            f"SMIDT cuts stages {j}/{j + 1} inside layer {layer} (its attention in stage {j}, "
            f"its FFN in stage {j + 1}); the engines cut whole layers, so layer {layer} "
            f"runs entirely in {who} (the less loaded of the two by the plan's stage times); "
            "that stage's time grows by the moved module, not re-priced here"
        )
        cuts.append(cut)
    bounds = [0, *cuts, total]
    return tuple(b - a for a, b in zip(bounds, bounds[1:], strict=False)), notes
