"""A warning when a quantized checkpoint's routed experts are priced slower than bf16.

The engines' measured fused-MoE tables (``moeplan.cost.kerneldb``) are the ground truth of
the cost model, and on some shapes a quantized kernel measures slower than the bf16 one
(NVIDIA's SGLang ``w4a16_mxfp4`` rows on H100: 2.22 ms vs bf16 2.15 ms for GPT-OSS-120B's
experts at 64 tokens on one GPU). The price is true to the table, but a user expects the
quantized checkpoint to be the faster one; this says so and names the table rows.
"""

from __future__ import annotations

from moeplan.cli._common import plural
from moeplan.errors import MoeplanError
from moeplan.specs import ClusterSpec, ModelSpec

#: Tokens entering the EP group per step, from a small decode batch to a prefill chunk
#: (the range the measured moe tables' ``num_tokens`` column covers: 1 to 16k).
TOKENS = (1, 16, 64, 256, 1024, 4096)
BF16 = "bfloat16"


def quant_slower_warning(
    model: ModelSpec, cluster: ClusterSpec, engine: str | None, ep: int = 1, tp: int = 1
) -> str | None:
    """One sentence when ``engine``'s fused-MoE tables price ``model``'s quantized routed
    experts at or above their bf16 price at some token count on an EP``ep`` x TP``tp``
    group; None when not quantized, no engine tables, or quantized is faster everywhere."""
    from moeplan.cost.kerneldb.pricing import moe_dtype, moe_shape

    dtype = moe_dtype(model)
    if engine is None or dtype == BF16 or model.num_experts < 2 or model.num_experts % ep:
        return None
    from moeplan.cost.kerneldb import device_for
    from moeplan.kernel_tables import kernel_db

    db, dev = kernel_db(), device_for(cluster)
    slower, detail = [], ""
    for n in TOKENS:
        shape = moe_shape(model, n * model.top_k / model.num_experts, model.num_experts / ep, tp)
        if shape is None:
            return None
        try:
            q = db.predict("moe", dev, engine, **shape)
            b = db.predict("moe", dev, engine, **{**shape, "moe_dtype": BF16})
        except MoeplanError:  # a dtype or shape the tables cannot price: nothing to compare
            return None
        if q.seconds > b.seconds:
            slower.append(f"{plural(n, 'token')}: {q.seconds * 1e3:.3f} vs {b.seconds * 1e3:.3f} ms")
            detail = detail or f"{q.detail} ({q.source}) vs {b.detail} ({b.source})"
    if not slower:
        return None
    return (
        f"{model.name}'s {dtype} routed experts are priced slower than bf16 by {engine}'s "
        f"fused-MoE table on {cluster.gpu.name} (EP{ep}, TP{tp}; {'; '.join(slower)}; "
        f"rows {detail}): true to the table, so a bf16 copy of this model can rank above "
        "this checkpoint."
    )
