"""Server flags every engine's launch writer shares: the placement file a slot gets and its
prefill chunk (pure: a slot and the export context in, arguments out)."""

from __future__ import annotations

from typing import Any

from moeplan.backends import EngineBackend
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
