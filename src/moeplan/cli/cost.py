"""``moeplan cost``: predicted time of one kernel for given shapes on a GPU and engine.

One shape from flags, or many from a Parquet/CSV table (``--table``) whose columns are named
as in NVIDIA's measured tables (see ``moeplan cost --help``). Each row gets ``predicted_ms``,
``source`` (measured / interpolated / transferred / roofline) and that source's held-out
median and p90 error; ``--out FILE.parquet`` writes the table with those columns added
(atomically). Flags that do not belong to the operation are rejected.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import typer

from moeplan.cli import _common as opt
from moeplan.cli._common import Table, console, fmt_times, print_json, write_atomic
from moeplan.commands.cost import (
    RANK_LOAD_COLS,
    check_kernel_source,
    cost_price_sources,
    kernel_device,
    prediction_rows,
    predictions_parquet,
    read_table,
    require_topk_fits,
    shape_columns,
    with_counts,
)
from moeplan.cost.kerneldb import KERNEL_FAMILIES, OPS, TABLE_ENGINES, Prediction
from moeplan.errors import MoeplanError
from moeplan.search.job.outcome import sources_line, version_text

Opt = typer.Option


def cost(
    op: Annotated[str, typer.Argument(help=f"Operation: {', '.join(OPS)}.")],
    engine: Annotated[str, Opt(help=f"Serving engine: {', '.join(TABLE_ENGINES)}.")] = "sglang",
    engine_version: opt.EngineVersionOpt = None,
    cluster: Annotated[str | None, Opt(help="Cluster preset (default h100-sxm-8).")] = None,
    gpu: Annotated[str | None, Opt(help="GPU preset instead of a cluster.")] = None,
    table: Annotated[
        str | None, Opt(help="Parquet/CSV of shapes, columns as in the measured tables.")
    ] = None,
    out: Annotated[
        str | None,
        Opt(help="Write the table with predicted_ms, source and errors added (.parquet)."),
    ] = None,
    json_out: Annotated[bool, Opt("--json", help="Print one JSON object.")] = False,
    num_tokens: Annotated[int | None, Opt(help="moe: tokens entering the EP group.")] = None,
    hidden_size: Annotated[int | None, Opt(help="moe / deepep: hidden size.")] = None,
    inter_size: Annotated[int | None, Opt(help="moe: expert intermediate size.")] = None,
    topk: Annotated[int | None, Opt(help="moe: experts per token.")] = None,
    num_experts: Annotated[int | None, Opt(help="moe / deepep: routed experts.")] = None,
    moe_tp_size: Annotated[int | None, Opt(help="moe: TP inside each expert.")] = None,
    moe_ep_size: Annotated[int | None, Opt(help="moe: EP degree.")] = None,
    distribution: Annotated[
        str | None, Opt(help="moe: balanced, random or power_law_<alpha>.")
    ] = None,
    moe_dtype: Annotated[
        str | None, Opt(help="moe: bfloat16, fp8, fp8_block, int4_wo, w4a16_mxfp4.")
    ] = None,
    batch_size: Annotated[int | None, Opt(help="attention / mla: sequences.")] = None,
    isl: Annotated[int | None, Opt(help="attention / mla: input (context) length.")] = None,
    step: Annotated[int | None, Opt(help="generation: decode step (keys = isl + step).")] = None,
    num_heads: Annotated[int | None, Opt(help="attention / mla: query heads per GPU.")] = None,
    num_key_value_heads: Annotated[int | None, Opt(help="attention: KV heads per GPU.")] = None,
    head_dim: Annotated[int | None, Opt(help="attention: head dimension.")] = None,
    window_size: Annotated[int | None, Opt(help="attention: sliding window (0 = none).")] = None,
    attn_dtype: Annotated[str | None, Opt(help="attention: bfloat16 or fp8.")] = None,
    kv_cache_dtype: Annotated[str | None, Opt(help="attention / mla: KV cache dtype.")] = None,
    mla_dtype: Annotated[str | None, Opt(help="mla: compute dtype.")] = None,
    message_size: Annotated[int | None, Opt(help="allreduce: bf16 elements.")] = None,
    num_gpus: Annotated[int | None, Opt(help="allreduce: GPUs.")] = None,
    num_token: Annotated[int | None, Opt(help="deepep: tokens per rank.")] = None,
    num_topk: Annotated[int | None, Opt(help="deepep: experts per token.")] = None,
    sms: Annotated[int | None, Opt(help="deepep normal: SMs given to the kernel.")] = None,
    kernel_source: Annotated[
        str | None, Opt(help="A measured kernel of the engine (default: the engine's usual one).")
    ] = None,
    gemm_type: Annotated[
        str | None, Opt(help="mla modules: projection GEMM dtype (bfloat16, fp8_block).")
    ] = None,
    column: Annotated[
        list[str] | None,
        Opt(
            "--col",
            help="Any column of the operation as NAME=VALUE (repeatable): the columns of the "
            "newer layer kinds (context_gdn: seq_len, num_k_heads, head_k_dim, num_v_heads, "
            "head_v_dim, d_conv; *_dsa_module: architecture; *_csa_module: compress_ratio; "
            "mhc: mhc_op, hc_mult, num_sites, sinkhorn_iters; ...). See the op's columns in "
            "the error of a wrong one.",
        ),
    ] = None,
    expert_counts: Annotated[
        str | None,
        Opt(
            help="moe: JSON list (inline, or a file holding one) of tokens routed to each "
            "expert in one batch (a routing trace); sets num_experts and num_tokens, prices "
            "the busiest EP rank."
        ),
    ] = None,
    redundant_experts: Annotated[
        int, Opt(help="With --expert-counts: EPLB redundant expert replicas.")
    ] = 0,
    eplb: Annotated[
        bool,
        Opt(
            help="With --expert-counts: place experts by EPLB's greedy packing "
            "(default: contiguous experts per rank)."
        ),
    ] = False,
) -> None:
    """Predicted time of one operation (per GPU) with its source and held-out error."""
    if op not in KERNEL_FAMILIES:
        raise MoeplanError(f"op ({op!r}) must be one of {', '.join(OPS)}")
    fam = KERNEL_FAMILIES[op]
    flags = {k: v for k, v in locals().items() if k in _SHAPE_FLAGS and v is not None}
    flags.update(shape_columns(column or [], flags))
    bad = [k for k in flags if k not in fam.columns]
    if bad:
        raise MoeplanError(
            f"--{bad[0].replace('_', '-')} does not apply to {op} "
            f"(its columns: {', '.join(fam.columns)})"
        )
    if table is not None and flags:
        raise MoeplanError("give shapes by flags or by --table, not both")
    if expert_counts is not None:
        flags = with_counts(op, flags, expert_counts, redundant_experts, eplb)
    elif redundant_experts or eplb:
        raise MoeplanError("--redundant-experts and --eplb need --expert-counts")
    cols = read_table(table) if table else {k: np.asarray([v]) for k, v in flags.items()}
    require_topk_fits(cols)
    dev, where = kernel_device(cluster, gpu)
    from moeplan.kernel_tables import kernel_db

    query = {c: v for c, v in cols.items() if c in fam.columns or c in RANK_LOAD_COLS}
    db = kernel_db(engine, engine_version)
    dev = db.held(dev)
    check_kernel_source(db, engine, op, query)
    preds = db.predict_many(op, dev, engine, query)
    rec = db.versions.get((dev.table or dev.reference, engine, op))
    ver = {"engine": engine, "requested": engine_version, "ops": {op: rec} if rec else {}}
    if out:
        write_atomic(out, predictions_parquet(out, cols, preds))
    _report(op, engine, where, cols, preds, json_out, out, ver)


#: the flags that give a shape: every parameter of :func:`cost` named as a column of some
#: operation (the rest choose the device, the engine and the output)
_SHAPE_FLAGS = frozenset(c for f in KERNEL_FAMILIES.values() for c in f.columns)


def _report(
    op: str,
    engine: str,
    where: str,
    cols: dict[str, np.ndarray],
    preds: list[Prediction],
    json_out: bool,
    out: str | None,
    version: dict,
) -> None:
    names = list(cols)
    rows, ps = prediction_rows(cols, preds), cost_price_sources(op, preds)
    if json_out:
        print_json({"op": op, "engine": engine, "engine_version": version, "device": where,
                    "out": out, "rows": rows, "price_sources": ps})  # fmt: skip
        return
    title = f"{op} on one GPU: {where}, engine {engine} (time per call, per GPU)"
    errs = [
        "exact row"
        if p.source == "measured"
        else ("not evaluated" if p.error is None else f"{p.error:.0%} / {p.error_p90:.0%}")
        for p in preds
    ]
    unit, times = fmt_times([p.seconds for p in preds])
    heads = [f"predicted ({unit})", "source", "held-out error (median / p90)"]
    if len(rows) == 1:  # one shape: a column of name / value fits any terminal
        console.print(title)  # as wide as the terminal, not the narrow table
        t = Table()
        t.add_column("column")
        t.add_column("value")
        for c in names:
            t.add_row(c, str(rows[0][c]))
        for h, v in zip(heads, (times[0], preds[0].source, errs[0]), strict=True):
            t.add_row(h, v)
    else:
        t = Table(title=title)
        for c in [*names, *heads]:
            t.add_column(c)
        for r, p, tm, err in zip(rows, preds, times, errs, strict=True):
            t.add_row(*[str(r[c]) for c in names], tm, p.source, err)
    console.print(t)
    console.print(f"kernel table: {preds[0].detail}{version_text(version)}", markup=False)
    console.print(sources_line(ps, "the predicted kernel time"))
    if out:
        console.print(f"table with predictions written to {out}")


def register(app: typer.Typer) -> None:
    app.command("cost")(cost)
