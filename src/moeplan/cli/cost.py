"""``moeplan cost``: predicted time of one kernel for given shapes on a GPU and engine.

One shape from flags, or many from a Parquet/CSV table (``--table``) whose columns are named
as in NVIDIA's measured tables (see ``moeplan cost --help``). Each row gets ``predicted_ms``,
``source`` (measured / interpolated / transferred / roofline) and that source's held-out
median and p90 error; ``--out FILE.parquet`` writes the table with those columns added
(atomically). Flags that do not belong to the operation are rejected.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from moeplan.cli._common import Table, console, fmt_times, print_json, write_atomic
from moeplan.cost.kerneldb import (
    KERNEL_FAMILIES,
    OPS,
    TABLE_ENGINES,
    Device,
    Prediction,
    device_for,
)
from moeplan.errors import MoeplanError
from moeplan.specs import cluster_names, cluster_table, load_cluster

Opt = typer.Option


def _device(cluster: str | None, gpu: str | None) -> tuple[Device, str]:
    if cluster and gpu:
        raise MoeplanError("give --cluster or --gpu, not both")
    if gpu:
        for name in cluster_names():
            c = load_cluster(name)
            if c.gpu.name == gpu:
                return device_for(c), f"{gpu} (links of cluster {name})"
        raise MoeplanError(
            f"gpu ({gpu!r}) is not a GPU preset; choose one of "
            f"{', '.join(sorted(cluster_table()['gpus']))}"
        )
    name = cluster or "h100-sxm-8"
    return device_for(load_cluster(name)), f"{load_cluster(name).gpu.name} (cluster {name})"


def _read_table(path: str) -> dict[str, np.ndarray]:
    p = Path(path)
    if not p.is_file():
        raise MoeplanError(f"table ({path!r}) does not exist")
    try:
        if p.suffix.lower() == ".csv":
            import pyarrow.csv as pcsv

            t = pcsv.read_csv(p)
        else:
            import pyarrow.parquet as pq

            t = pq.read_table(p)
    except Exception as err:  # pyarrow raises several types for bad files
        raise MoeplanError(
            f"table {path} could not be read: {' '.join(str(err).split())}"
        ) from None
    if t.num_rows == 0:
        raise MoeplanError(f"table {path} has no rows")
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}


def _write_out(path: str, cols: dict[str, np.ndarray], preds: list[Prediction]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.endswith(".parquet"):
        raise MoeplanError(f"out ({path!r}) must end in .parquet")
    data = {c: np.asarray(v) for c, v in cols.items()}
    data["predicted_ms"] = np.array([p.seconds * 1e3 for p in preds])
    data["source"] = np.array([p.source for p in preds])
    data["error_median"] = np.array([np.nan if p.error is None else p.error for p in preds])
    data["error_p90"] = np.array([np.nan if p.error_p90 is None else p.error_p90 for p in preds])
    buf = io.BytesIO()
    pq.write_table(pa.table(data), buf)
    write_atomic(path, buf.getvalue())


def cost(
    op: Annotated[str, typer.Argument(help=f"Operation: {', '.join(OPS)}.")],
    engine: Annotated[str, Opt(help=f"Serving engine: {', '.join(TABLE_ENGINES)}.")] = "sglang",
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
    flags.update(_columns(column or [], flags))
    bad = [k for k in flags if k not in fam.columns]
    if bad:
        raise MoeplanError(
            f"--{bad[0].replace('_', '-')} does not apply to {op} "
            f"(its columns: {', '.join(fam.columns)})"
        )
    if table is not None and flags:
        raise MoeplanError("give shapes by flags or by --table, not both")
    if expert_counts is not None:
        flags = _with_counts(op, flags, expert_counts, redundant_experts, eplb)
    elif redundant_experts or eplb:
        raise MoeplanError("--redundant-experts and --eplb need --expert-counts")
    cols = _read_table(table) if table else {k: np.asarray([v]) for k, v in flags.items()}
    _require_topk_fits(cols)
    dev, where = _device(cluster, gpu)
    from moeplan.kernel_tables import kernel_db

    query = {c: v for c, v in cols.items() if c in fam.columns or c in _LOAD_COLS}
    preds = kernel_db().predict_many(op, dev, engine, query)
    if out:
        _write_out(out, cols, preds)
    _report(op, engine, where, cols, preds, json_out, out)


_LOAD_COLS = ("rank_pairs", "rank_hit")


def _columns(pairs: list[str], flags: dict) -> dict[str, object]:
    """``--col NAME=VALUE`` pairs as columns (numbers where they parse as numbers)."""
    out: dict[str, object] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name or not value:
            raise MoeplanError(f"--col ({pair!r}) must be NAME=VALUE")
        if name in flags or name in out:
            raise MoeplanError(f"--col {name} is given twice")
        try:
            out[name] = int(value)
        except ValueError:
            try:
                out[name] = float(value)
            except ValueError:
                out[name] = value
    return out


def _require_topk_fits(cols: dict[str, np.ndarray]) -> None:
    """A token cannot pick more distinct experts than there are (moe ``topk``, deepep
    ``num_topk``): refuse such a row instead of pricing it."""
    for k in ("topk", "num_topk"):
        if k in cols and "num_experts" in cols:
            top, num = np.asarray(cols[k], float), np.asarray(cols["num_experts"], float)
            bad = np.flatnonzero(top > num)
            if bad.size:
                i = int(bad[0])
                raise MoeplanError(
                    f"--{k.replace('_', '-')} ({top[i]:g}) must be <= --num-experts "
                    f"({num[i]:g}): a token picks distinct experts"
                )


def _with_counts(op: str, flags: dict, path: str, redundant: int, eplb: bool) -> dict:
    """Shape flags + the busiest rank's load from per-expert counts (a routing trace)."""
    import json

    from moeplan.cost.kerneldb.pricing import explicit_load

    if op != "moe":
        raise MoeplanError(f"--expert-counts applies to moe, not {op}")
    if redundant < 0:
        raise MoeplanError(f"redundant_experts ({redundant}) must be >= 0")
    if "topk" not in flags:
        raise MoeplanError("--expert-counts needs --topk")
    inline = path.lstrip().startswith("[")  # a JSON list given on the command line
    if not inline:  # a regular file (a FIFO would block the read forever)
        from moeplan.io import check_regular_file

        check_regular_file(path, "--expert-counts")
    try:
        counts = json.loads(path if inline else Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        what = "--expert-counts" if inline else f"expert counts {path}"
        raise MoeplanError(f"{what} could not be read as JSON: {err}") from None
    if not isinstance(counts, list) or not all(isinstance(c, int | float) for c in counts):
        raise MoeplanError(f"expert counts {path} must be a JSON list of numbers")
    load = explicit_load(
        np.asarray(counts, float),
        int(flags["topk"]),
        int(flags.get("moe_ep_size", 1)),
        redundant,
        eplb,
    )
    for key in ("num_experts", "num_tokens"):
        if key in flags and float(flags[key]) != float(load[key]):  # type: ignore[arg-type]
            raise MoeplanError(
                f"--{key.replace('_', '-')} ({flags[key]}) disagrees with "
                f"--expert-counts ({load[key]:g})"
            )
    if "distribution" in flags:
        raise MoeplanError("--distribution and --expert-counts exclude each other")
    return {**flags, **load}


_SHAPE_FLAGS = (
    "num_tokens",
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
    "distribution",
    "moe_dtype",
    "batch_size",
    "isl",
    "step",
    "num_heads",
    "num_key_value_heads",
    "head_dim",
    "window_size",
    "attn_dtype",
    "kv_cache_dtype",
    "mla_dtype",
    "message_size",
    "num_gpus",
    "num_token",
    "num_topk",
    "sms",
    "kernel_source",
    "gemm_type",
)


def _report(
    op: str,
    engine: str,
    where: str,
    cols: dict[str, np.ndarray],
    preds: list[Prediction],
    json_out: bool,
    out: str | None,
) -> None:
    names = list(cols)
    rows = []
    for i, p in enumerate(preds):
        r = {
            c: np.asarray(cols[c])[i].item()
            if hasattr(np.asarray(cols[c])[i], "item")
            else cols[c][i]
            for c in names
        }
        r.update(
            predicted_ms=p.seconds * 1e3,
            source=p.source,
            error_median=p.error,
            error_p90=p.error_p90,
            detail=p.detail,
        )
        rows.append(r)
    if json_out:
        print_json({"op": op, "engine": engine, "device": where, "out": out, "rows": rows})
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
    console.print(f"kernel table: {preds[0].detail}", markup=False)
    if out:
        console.print(f"table with predictions written to {out}")


def register(app: typer.Typer) -> None:
    app.command("cost")(cost)
