"""Where a cost model's prices came from, how far to trust each source, and quantized kernels
that the engine's own table prices slower than bf16. Pure: read from a :class:`CostModel`.

- :func:`pricing`: which engine's kernels priced the operations asked so far, from which GPU's
  tables, and the source mix (share of kernel lookups per source, each operation's held-out
  error per source). Its one line for terminals and script headers is
  :func:`moeplan.search.job.outcome.pricing_line`.
- :func:`engine_version`: the engine version asked (``--engine-version``) and, per operation,
  the table release that priced it and how (measured, nearest version, extrapolated + error).
- :func:`source_errors`: one row per source (measured / interpolated / transferred /
  roofline) with its share of lookups and the held-out error range over the operations it
  priced — the errors the kernel database ships (:mod:`moeplan.cost.kerneldb.sources`).
- :func:`quant_vs_bf16`: when the checkpoint's routed experts are quantized and the engine's
  fused-MoE table prices them slower than bf16 weights at some batch, the figures and the
  table (true to NVIDIA's measurements, surprising to a user).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from moeplan.cost.kerneldb import device_for
from moeplan.cost.kerneldb.pricing import moe_dtype, moe_shape
from moeplan.cost.model import CostModel
from moeplan.specs import ModelSpec
from moeplan.specs.quant import UNQUANTIZED

#: Tokens entering the fused-MoE kernel at which :func:`quant_vs_bf16` compares dtypes: a
#: decode batch (1..256 sequences) and a prefill chunk (4,096 tokens), rows the tables measure
#: (aiconfigurator's moe_perf ``num_tokens`` grid).
QUANT_PROBE_TOKENS = (1, 16, 64, 256, 4096)


def pricing(cm: CostModel) -> dict[str, Any]:
    """Which engine's kernels priced the operations ``cm`` was asked for so far, from which
    tables, and the source mix (share of kernel lookups per source, with held-out errors)."""
    gpu = cm.cluster.gpu.name
    if cm.engine is None:
        return {
            "engine": None,
            "gpu": gpu,
            "sources": {},
            "ops": {},
            "note": f"no engine: every operation from the {cm.profile_name} GEMM/NCCL model",
        }
    dev = device_for(cm.cluster) if cm._kdb is None else cm._kdb.held(device_for(cm.cluster))
    ops = cm.provenance()
    calls: dict[str, int] = {}
    for cells in ops.values():
        for src, cell in cells.items():
            calls[src] = calls.get(src, 0) + int(cell["calls"] or 0)
    total = sum(calls.values())
    tables = f"NVIDIA's measured {cm.engine} tables on {dev.table}"
    shipped = dev.table is not None
    note = (
        f"{cm.engine} kernels from {tables}"
        if shipped
        else f"no measured tables for {gpu}: {cm.engine} kernels transferred from the "
        f"{dev.reference} tables, scaled by the {gpu} datasheet"
    )
    return {
        "engine": cm.engine,
        "gpu": gpu,
        "tables_gpu": dev.table if shipped else None,
        "reference_gpu": dev.reference,
        "transferred_gpu": not shipped,
        "lookups": total,
        "sources": {s: {"lookups": n, "share": n / total} for s, n in sorted(calls.items())},
        "ops": ops,
        "engine_version": engine_version(cm, ops),
        "note": note + "; GEMMs, projections and inter-node traffic from the "
        f"{cm.profile_name} model",
    }


def engine_version(cm: CostModel, ops: Any = None) -> dict[str, Any] | None:
    """The engine version ``cm``'s kernel tables price (``requested`` None: the newest table
    of each operation) and, per operation priced so far (``ops``: :meth:`CostModel.provenance`,
    default all asked), the table version and how it prices the request — ``measured``,
    ``nearest version`` or ``extrapolated`` with the leave-one-version-out transfer error
    (:mod:`moeplan.backends.versions`); ``None`` without an engine."""
    kdb = cm._kdb
    if kdb is None or cm.engine is None:
        return None
    ops = cm.provenance() if ops is None else ops
    table = cm._device.table or cm._device.reference
    asked = kdb.engine_version
    per_op = {
        op: dict(kdb.versions[(table, cm.engine, op)])
        for op in sorted(ops)
        if (table, cm.engine, op) in kdb.versions
    }
    return {
        "engine": cm.engine,
        "requested": None if asked is None else asked[1],
        "tables_gpu": table,
        "ops": per_op,
    }


def source_errors(p: dict[str, Any]) -> list[dict[str, Any]]:
    """Per source of :func:`pricing`: lookups, share, the operations it priced and the range
    of their held-out median and p90 errors (``None`` where the database has no figure)."""
    rows = []
    for src, agg in p.get("sources", {}).items():
        cells = {op: c[src] for op, c in p["ops"].items() if src in c}
        med = [c["error_median"] for c in cells.values() if c["error_median"] is not None]
        p90 = [c["error_p90"] for c in cells.values() if c["error_p90"] is not None]
        rows.append({
            "source": src, "lookups": agg["lookups"], "share": agg["share"],
            "ops": sorted(cells),
            "error_median": (min(med), max(med)) if med else None,
            "error_p90": (min(p90), max(p90)) if p90 else None,
        })  # fmt: skip
    return rows


def quant_vs_bf16(
    cm: CostModel, model: ModelSpec, ep: int = 1, tp: int = 1
) -> dict[str, Any] | None:
    """The engine's fused-MoE table pricing this checkpoint's quantized routed experts slower
    than bf16 ones on one GPU of an EP``ep`` x TP``tp`` group (same shape): the worst batch,
    both times and the table; ``None`` when the experts are bf16, there is no engine table, or
    it is not slower. Reads the kernel database directly: the plan's source mix is unchanged."""
    kdb = cm._kdb
    if kdb is None or cm.engine is None or not model.quant.experts.format.quantized:
        return None
    if ep < 1 or model.num_experts % ep:
        return None
    dev, plain = cm._device, replace(model, quant=UNQUANTIZED)
    worst: dict[str, Any] | None = None
    for n in QUANT_PROBE_TOKENS:
        tpe = n * model.top_k / model.num_experts
        q = moe_shape(model, tpe, model.num_experts / ep, tp)
        b = moe_shape(plain, tpe, model.num_experts / ep, tp)
        if q is None or b is None:
            return None
        pq, pb = kdb.predict("moe", dev, cm.engine, **q), kdb.predict("moe", dev, cm.engine, **b)
        tq, tb = pq.seconds, pb.seconds
        if tq > tb and (worst is None or tq / tb > worst["ratio"]):
            worst = {
                "tokens": n,
                "quant_s": tq,
                "bf16_s": tb,
                "ratio": tq / tb,
                "quant_source": pq.source,
                "bf16_source": pb.source,
            }
    if worst is None:
        return None
    table = dev.table or dev.reference
    return {
        **worst, "dtype": moe_dtype(model), "engine": cm.engine, "gpu": cm.cluster.gpu.name,
        "ep": ep, "tp": tp,
        "table": f"NVIDIA's measured {cm.engine} fused-MoE table (moe_perf) on {table}",
    }  # fmt: skip
