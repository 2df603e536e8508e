"""Server flags every engine's launch writer shares: the placement file a slot gets, its
prefill chunk and the scheduler figures the plan simulated (memory fraction, running cap,
decode CUDA-graph batch) (pure: a slot and the export context in, arguments out)."""

from __future__ import annotations

from typing import Any

from moeplan.backends import EngineBackend
from moeplan.backends.base import MemoryContext
from moeplan.export.deployment import Slot


def location(slot: Slot, ctx: Any, notes: list[str]) -> str | None:
    """The ``expert_location.json`` a slot's servers load (None: none fits; ``notes`` say
    why where a user would expect one)."""
    if ctx.placement_width is None or slot.strategy.moe_ep <= 1:
        return None
    if ctx.truncated:
        notes.append("expert_location.json covers only the planned layers; it is not passed")
        return None
    if ctx.placement_ep != slot.strategy.moe_ep:
        notes.append(
            f"expert_location.json was placed for EP{ctx.placement_ep}, the {slot.role} "
            f"servers run EP{slot.strategy.moe_ep}; it is not passed to them"
        )
        return None
    return "${HERE}/expert_location.json"


def chunk_args(b: EngineBackend, slot: Slot, ctx: Any) -> list[str]:
    """The prefill chunk the plan priced (P/D prefill pools), else the one the engine needs
    for the model (:meth:`moeplan.backends.EngineBackend.required_chunk`)."""
    s = slot.strategy
    if slot.pool.chunk:
        return b.chunk_args(slot.pool.chunk, s.attn_dp)
    need = b.required_chunk(ctx.target.architecture, s.attn_dp)
    return [] if need is None else ["--chunked-prefill-size", str(need)]


def memory_context(slot: Slot, ctx: Any) -> MemoryContext | None:
    """What the engine's memory rules read of the slot's instance (None: the export context
    has no GPU record)."""
    if ctx.gpu is None:
        return None
    s, k = slot.strategy, slot.pool.knobs
    return MemoryContext(
        gpu=ctx.gpu,
        tp=s.stage_size,
        pp=s.pp,
        attn_dp=s.attn_dp,
        chunk=slot.pool.chunk or 0,
        deepep=getattr(k, "a2a", "") == "deepep",
        mla=ctx.mla,
        role=slot.role,
        mtp=getattr(k, "mtp", 0),
    )


def pinned_args(b: EngineBackend, slot: Slot, ctx: Any) -> list[str]:
    """The flags that pin what the plan simulated beside the knobs: the memory fraction (when
    the knobs do not carry it), the running-request cap and the decode CUDA-graph batch."""
    pool = slot.pool
    out: list[str] = []
    if getattr(pool.knobs, "mem_fraction", None) is None:
        out += b.mem_fraction_args(pool.mem_fraction)
    out += b.running_args(pool.max_running, slot.strategy.attn_dp)
    mc = memory_context(slot, ctx)
    if mc is not None:
        out += b.graph_args(mc, pool.max_running)
    return out


def pinned(b: EngineBackend, slot: Slot, ctx: Any, location_file: str | None) -> dict[str, Any]:
    """What one server's command pins, as ``launch/deployment.json`` records it (the export
    bench compares the engines' resolution of the commands with it)."""
    pool, k = slot.pool, slot.pool.knobs
    mc = memory_context(slot, ctx)
    running = b.running_args(pool.max_running, slot.strategy.attn_dp)
    return {
        "mem_fraction": getattr(k, "mem_fraction", None) or pool.mem_fraction,
        "max_running": pool.max_running,
        "max_running_flag": None if not running else int(running[1]),
        "cuda_graph_max_bs": None if mc is None else b.graph_max_bs(mc, pool.max_running),
        "chunk_tokens": pool.chunk,
        "a2a": getattr(k, "a2a", None),
        "tbo": bool(getattr(k, "tbo", False)),
        "mtp": int(getattr(k, "mtp", 0)),
        "redundant_experts": max(ctx.redundant if location_file else 0, pool.redundant),
        "expert_location": location_file,
    }
