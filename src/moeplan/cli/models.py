"""``moeplan models``, ``moeplan clusters``, ``moeplan inspect``: what is shipped, and a model's sizes."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from moeplan.cli._common import Table, console, fmt_bytes, fmt_count, print_json
from moeplan.cli.models_layers import layers_summary, print_layers
from moeplan.cost import memory as mem
from moeplan.errors import require
from moeplan.specs import ModelSpec, cluster_names, load_cluster, load_model, model_names
from moeplan.specs.presets import model_sources

JSON = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def models(json_out: JSON = False) -> None:
    """List the shipped model presets with total and activated parameters."""
    rows: list[dict[str, Any]] = []
    for name in model_names():
        m = load_model(name)
        rows.append(
            {
                "name": name,
                "architecture": m.architecture,
                "params_total": m.params_total,
                "params_active": m.params_active,
                "layers": m.num_layers,
                "experts": m.num_experts,
                "top_k": m.top_k,
                "attention": m.attention,
            }
        )
    if json_out:
        print_json({"models": rows})
        return
    t = Table(title="Model presets")
    for c in ("name", "architecture", "total", "active", "layers", "experts", "top-k", "attention"):
        t.add_column(c)
    for r in rows:
        t.add_row(
            r["name"],
            r["architecture"],
            fmt_count(r["params_total"]),
            fmt_count(r["params_active"]),
            str(r["layers"]),
            str(r["experts"]),
            str(r["top_k"]),
            r["attention"],
        )
    console.print(t)


def clusters(json_out: JSON = False) -> None:
    """List the shipped cluster presets."""
    rows: list[dict[str, Any]] = []
    for name in cluster_names():
        c = load_cluster(name)
        rows.append(
            {
                "name": name,
                "nodes": c.num_nodes,
                "gpus_per_node": c.gpus_per_node,
                "gpu": c.gpu.name,
                "flops_bf16": c.gpu.flops_bf16,
                "mem_bytes": c.gpu.mem_bytes,
                "intra_bw": c.intra.bw,
                "intra_kind": c.intra.kind,
                "inter_bw": c.inter.bw,
                "profile": c.profile,
                "source": c.source,
            }
        )
    if json_out:
        print_json({"clusters": rows})
        return
    t = Table(title="Cluster presets (bandwidth per GPU per direction)")
    for col in ("name", "GPUs", "GPU", "bf16", "memory", "intra", "inter", "profile"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["name"],
            f"{r['nodes']}x{r['gpus_per_node']}",
            r["gpu"],
            f"{r['flops_bf16'] / 1e12:.0f} TF/s",
            fmt_bytes(r["mem_bytes"]),
            f"{r['intra_kind']} {r['intra_bw'] / 1e9:.0f} GB/s",
            f"{r['inter_bw'] / 1e9:.1f} GB/s",
            r["profile"] or "roofline",
        )
    console.print(t)


def inspect(
    model: Annotated[str, typer.Argument(help="Preset name, config.json or checkpoint folder.")],
    cluster: Annotated[
        str | None, typer.Option(help="Cluster preset for the memory floor.")
    ] = None,
    nodes: Annotated[int | None, typer.Option(help="Override the cluster's node count.")] = None,
    gpus: Annotated[int | None, typer.Option(help="Degree (GPUs) for the memory floor.")] = None,
    context: Annotated[int, typer.Option(help="Context length for attention FLOPs.")] = 4096,
    json_out: JSON = False,
) -> None:
    """Sizes, FLOPs per token, KV cache per token, weight storage (quantization) per module
    and the weight floor per GPU of a model."""
    require(context >= 1, f"context ({context}) must be >= 1")
    m = load_model(model)
    out = {
        "name": m.name,
        "architecture": m.architecture,
        "params_total": m.params_total,
        "params_active": m.params_active,
        "kv_bytes_per_token": m.kv_bytes_per_token,
        "weight_bytes": m.weight_bytes_total(),
        "hidden_bytes_per_token": m.hidden_bytes,
        "flops_per_token_decode": m.flops_per_token(context, "decode"),
        "flops_per_token_prefill": m.flops_per_token(context, "prefill"),
        "context": context,
        "source": model_sources().get(m.name, ""),
        "modules": [
            {
                "name": i.name,
                "params": i.params,
                "flops_per_token": i.flops_per_token,
                "count": i.count,
            }
            for i in m.modules(context)
        ],
        "quantization": _quantization(m),
        **layers_summary(m, context),
    }
    require(gpus is None or gpus >= 1, f"--gpus ({gpus}) must be >= 1")
    require(gpus is None or cluster is not None, "--gpus needs --cluster (the GPUs it counts)")
    if cluster is not None:
        c = load_cluster(cluster, nodes)
        n = gpus or c.num_gpus
        floor = mem.floor_breakdown(m, n)  # the planners' memory model, one token
        out["memory"] = {
            "cluster": c.name,
            "gpus": n,
            "weights_floor_per_gpu": floor.weights,
            "reserved_per_gpu": floor.reserved,
            "floor_per_gpu": floor.total,
            "gpu_mem_bytes": c.gpu.mem_bytes,
            "fits": floor.fits(c.gpu.mem_bytes),
        }
    if json_out:
        print_json(out)
        return
    _print_inspect(out)


#: where the time of a quantized GEMM comes from (no measured int4 GEMM tables)
TIME_SOURCE = (
    "roofline: weight-bound (decode) GEMMs read the stored bytes per weight at HBM bandwidth, "
    "compute-bound GEMMs run at the compute dtype's datasheet peak; with --engine the routed "
    "experts use the fused-MoE tables of their kernel dtype (measured/interpolated where the "
    "engine has that dtype, else transferred)"
)


def _quantization(m: ModelSpec) -> dict[str, Any]:
    """The checkpoint's weight storage per module class (bytes include scales and zeros)."""
    q = m.quant
    rows = {}
    for cls, (params, nbytes) in m.weight_bytes_by_module().items():
        mq = q.module(cls) if cls != "towers" else q.module("embedding")  # towers: bf16
        rows[cls] = {"params": params, "bytes": nbytes, **mq.to_dict()}
    return {
        "method": q.method,
        "ignore": list(q.ignore),
        "modules": rows,
        "weight_bytes_total": m.weight_bytes_total(),
        "time_source": TIME_SOURCE,
    }


def _print_quantization(qz: dict) -> None:
    t = Table(
        title=f"Weights as stored (quantization: {qz['method']}; bytes per weight "
        "include scales and zero points)"
    )
    for c in (
        "module",
        "params",
        "format",
        "bits",
        "group",
        "bytes/weight",
        "total",
        "GEMM compute",
    ):
        t.add_column(c)
    for cls, r in qz["modules"].items():
        if r["params"]:
            t.add_row(
                cls,
                fmt_count(r["params"]),
                r["format"],
                str(r["bits"]),
                str(r["group_size"] or "-"),
                f"{r['bytes_per_weight']:.4f}",
                fmt_bytes(r["bytes"]),
                r["compute"],
            )
    console.print(t)
    if qz["ignore"]:
        console.print(f"left unquantized by the config: {', '.join(qz['ignore'])}")
    console.print(f"time of quantized GEMMs: {qz['time_source']}")


def _print_inspect(out: dict) -> None:
    console.print(
        f"[bold]{out['name']}[/] ({out['architecture']}): "
        f"{fmt_count(out['params_total'])} parameters, "
        f"{fmt_count(out['params_active'])} activated per token"
    )
    console.print(
        f"weights {fmt_bytes(out['weight_bytes'])}, KV cache "
        f"{fmt_bytes(out['kv_bytes_per_token'])} per token, "
        f"{out['flops_per_token_decode'] / 1e9:.1f} GFLOP per decode token at context "
        f"{out['context']}"
    )
    t = Table()
    for c in ("module", "layers", "params", "GFLOP/token"):
        t.add_column(c)
    for i in out["modules"]:
        t.add_row(
            i["name"], str(i["count"]), fmt_count(i["params"]), f"{i['flops_per_token'] / 1e9:.2f}"
        )
    console.print(t)
    print_layers(out)
    _print_quantization(out["quantization"])
    if "memory" in out:
        mm = out["memory"]
        verdict = "fits" if mm["fits"] else "does NOT fit"
        console.print(
            f"least memory per GPU over {mm['gpus']} GPUs of {mm['cluster']}: "
            f"{fmt_bytes(mm['weights_floor_per_gpu'])} of weights + "
            f"{fmt_bytes(mm['reserved_per_gpu'])} runtime reserve (+ KV cache and "
            f"activations) = {fmt_bytes(mm['floor_per_gpu'])} of "
            f"{fmt_bytes(mm['gpu_mem_bytes'])} — {verdict} (the planners' memory "
            "model; a plan also needs room for its batch)"
        )


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    app.command("clusters")(clusters)
    app.command("inspect")(inspect)
