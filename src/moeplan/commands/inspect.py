"""``moeplan models``, ``clusters`` and ``inspect``: the shipped presets as rows, and one
model's sizes, FLOPs, cache, weight storage and memory floor as the ``--json`` object.

Per decoder layer kind (``<mixer>+<ffn>``, :func:`layers_summary`): how many layers, the
mixer's window / chunk / top-k / compression, the cache one token adds (KV, before any window
cap) and the cache of one sequence of ``context`` tokens (window-capped, compressed, or the
linear layers' fixed state) — the figures the serving memory model sizes the KV pool from
(:mod:`moeplan.specs.layer_math`).
"""

from __future__ import annotations

from typing import Any

from moeplan.cost import memory as mem
from moeplan.errors import require
from moeplan.specs import ModelSpec, cluster_names, load_cluster, load_model, model_names
from moeplan.specs import layer_math as lm
from moeplan.specs.presets import model_sources

#: what inspect says about towers
TOWER_SCOPE = "loaded with the model and counted in weight memory; serving them is out of scope"


def _detail(x: Any) -> str:
    m, f = x.mixer, x.ffn
    parts = []
    if m.window:
        parts.append(f"window {m.window}")
    if m.chunk:
        parts.append(f"chunk {m.chunk}")
    if m.index_topk:
        parts.append(f"top-{m.index_topk} of {m.index_n_heads}x{m.index_head_dim} indexer")
    if m.compress_ratio:
        parts.append(f"1 entry per {m.compress_ratio} tokens")
    if m.topk_blocks:
        parts.append(f"top-{m.topk_blocks} blocks of {m.block_size}")
    if f.kind == "moe":
        parts.append(f"{f.top_k}/{f.num_experts} experts, router {f.router}"
                     + (f", {f.topk_group}/{f.n_group} groups" if f.n_group > 1 else "")
                     + (f", shared {f.shared_intermediate_size}" if f.shared_intermediate_size
                        else ""))  # fmt: skip
    return "; ".join(parts)


def layers_summary(m: ModelSpec, context: int) -> dict[str, Any]:
    """JSON rows: one per layer kind (see module docstring), and the towers."""
    rows: dict[str, dict[str, Any]] = {}
    for x in m.layer_specs:
        key = x.kind + (" (hash-routed)" if x.ffn.router == "hash" and x.is_moe else "")
        r = rows.setdefault(key, {
            "kind": key, "mixer": x.mixer.kind, "ffn": x.ffn.kind, "layers": 0,
            "detail": _detail(x), "kv_bytes_per_token": 0.0, "cache_bytes_per_seq": 0.0,
            "state_bytes_per_seq": 0.0,
        })  # fmt: skip
        r["layers"] += 1
        r["kv_bytes_per_token"] += lm.kv_bytes_per_token(x.mixer)
        r["cache_bytes_per_seq"] += lm.kv_bytes_for_context(x.mixer, context)
        r["state_bytes_per_seq"] += lm.state_bytes_per_seq(x.mixer)
    towers = [{"name": t.name, "params": t.params, "source": t.source, "scope": TOWER_SCOPE}
              for t in m.towers]  # fmt: skip
    return {"layer_kinds": list(rows.values()), "towers": towers,
            "cache_bytes_per_seq": m.kv_bytes_for_context(context)}  # fmt: skip


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


def model_rows() -> list[dict[str, Any]]:
    """One row per shipped model preset: total and activated parameters, shape."""
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
    return rows


def cluster_rows() -> list[dict[str, Any]]:
    """One row per shipped cluster preset (bandwidth per GPU per direction)."""
    from moeplan.cost import profile_names

    profiles = set(profile_names())
    rows: list[dict[str, Any]] = []
    for name in cluster_names():
        c = load_cluster(name)
        rows.append(
            {
                "name": name,
                "nodes": c.num_nodes,
                "gpus_per_node": c.gpus_per_node,
                "nvlink_domain": c.nvlink_domain,
                "gpu": c.gpu.name,
                "flops_bf16": c.gpu.flops_bf16,
                "mem_bytes": c.gpu.mem_bytes,
                "intra_bw": c.intra.bw,
                "intra_kind": c.intra.kind,
                "inter_bw": c.inter.bw,
                # the cluster's fitted profile where one is shipped, else roofline (None)
                "profile": c.profile if c.profile in profiles else None,
                "source": c.source,
            }
        )
    return rows


def inspect_model(
    model: str,
    *,
    cluster: str | None,
    nodes: int | None,
    gpus: int | None,
    context: int,
    racks: int | None = None,
) -> dict[str, Any]:
    """``inspect``'s answer: sizes, FLOPs per token, KV cache per token, weight storage per
    module, layer kinds and, with ``cluster``, the weight floor per GPU over ``gpus``."""
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
        c = load_cluster(cluster, nodes, racks)
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
    return out
