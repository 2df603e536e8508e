"""``moeplan models``, ``moeplan clusters``, ``moeplan inspect``: what is shipped, and a model's sizes."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from moeplan.cli import _common as opt
from moeplan.cli._common import NodesOpt, Table, console, fmt_bytes, fmt_count, print_json
from moeplan.commands.inspect import cluster_rows, inspect_model, model_rows

JSON = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def models(json_out: JSON = False) -> None:
    """List the shipped model presets with total and activated parameters."""
    rows = model_rows()
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
    rows = cluster_rows()
    if json_out:
        print_json({"clusters": rows})
        return
    t = Table(title="Cluster presets (bandwidth per GPU per direction)")
    for col in ("name", "GPUs", "GPU", "bf16", "memory", "intra", "inter", "profile"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["name"],
            f"{r['nodes']}x{r['gpus_per_node']}"
            + (
                f" (NVLink {r['nvlink_domain']})" if r["nvlink_domain"] > r["gpus_per_node"] else ""
            ),
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
    nodes: NodesOpt = None,
    racks: opt.RacksOpt = None,
    gpus: Annotated[int | None, typer.Option(help="Degree (GPUs) for the memory floor.")] = None,
    context: Annotated[int, typer.Option(help="Context length for attention FLOPs.")] = 4096,
    json_out: JSON = False,
) -> None:
    """Sizes, FLOPs per token, KV cache per token, weight storage (quantization) per module
    and the weight floor per GPU of a model."""
    out = inspect_model(
        model, cluster=cluster, nodes=nodes, racks=racks, gpus=gpus, context=context
    )
    if json_out:
        print_json(out)
        return
    _print_inspect(out)


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


def print_layers(out: dict[str, Any]) -> None:
    t = Table(title=f"Decoder layers by kind (cache: all layers of the kind; one sequence of "
                    f"{out['context']} tokens)")  # fmt: skip
    for c in ("mixer+ffn", "layers", "KV / token", "cache / sequence", "of it fixed state",
              "shape"):  # fmt: skip
        t.add_column(c)
    for r in out["layer_kinds"]:
        t.add_row(r["kind"], str(r["layers"]), fmt_bytes(r["kv_bytes_per_token"]),
                  fmt_bytes(r["cache_bytes_per_seq"]), fmt_bytes(r["state_bytes_per_seq"]),
                  r["detail"])  # fmt: skip
    console.print(t)
    for tw in out["towers"]:
        console.print(f"{tw['name']} tower: {fmt_count(tw['params'])} parameters "
                      f"({tw['source']}) — {tw['scope']}")  # fmt: skip


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
