"""Expert placement at run time: ``details.placement.physical_to_logical_map`` (Sem-MoE / EPLB).

A placement lists, per MoE layer, the logical expert held by each *physical* slot; slots are
split contiguously over the EP ranks (``P/ep`` each, as SGLang's ``--init-expert-location``).
With ``P == E`` it is a permutation (Sem-MoE's model scheduling: experts regrouped by affinity);
with ``P > E`` some experts have replicas (EPLB). Routing stays logical; each (token, expert)
row is sent to one replica of its expert, chosen as ``(token + slot) mod replicas`` so replicas
share the load deterministically. The layer's result is unchanged by any valid placement —
the tests check exactly that — while the rows each rank receives change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from moeplan.errors import require
from moeplan.runtime.layers.moe import MoEWeights


@dataclass(frozen=True, kw_only=True, slots=True)
class Placement:
    """One layer: ``phys_to_log [P]``, ``table [E, R]`` replica slots (-1 pad), ``replicas [E]``."""

    phys_to_log: torch.Tensor
    table: torch.Tensor
    replicas: torch.Tensor

    @property
    def num_slots(self) -> int:
        return int(self.phys_to_log.numel())


def make_placement(phys_to_log: list[int], num_experts: int, ep: int) -> Placement:
    """Validate one layer's map and build its replica table."""
    p = len(phys_to_log)
    require(p % ep == 0, f"placement physical experts ({p}) must be divisible by ep ({ep})")
    require(
        all(isinstance(e, int) and 0 <= e < num_experts for e in phys_to_log),
        f"placement entries must be logical expert ids in [0, {num_experts})",
    )
    m = torch.tensor(phys_to_log, dtype=torch.long)
    replicas = torch.bincount(m, minlength=num_experts)
    require(
        bool((replicas > 0).all()),
        f"placement must hold every logical expert (missing {int((replicas == 0).sum())})",
    )
    table = torch.full((num_experts, int(replicas.max())), -1, dtype=torch.long)
    for e in range(num_experts):
        slots = torch.nonzero(m == e).flatten()
        table[e, : slots.numel()] = slots
    return Placement(phys_to_log=m, table=table, replicas=replicas)


def placements(
    details: dict[str, Any], num_layers: int, num_experts: int, ep: int
) -> list[Placement] | None:
    """Per-layer placements from ``plan.details`` (None when the plan has none)."""
    maps = ((details or {}).get("placement") or {}).get("physical_to_logical_map")
    if maps is None:
        return None
    require(
        isinstance(maps, list) and len(maps) >= num_layers,
        f"placement.physical_to_logical_map ({len(maps) if isinstance(maps, list) else maps!r} "
        f"layers) must list at least {num_layers} layers",
    )
    return [make_placement(list(maps[i]), num_experts, ep) for i in range(num_layers)]


def to_physical(ids: torch.Tensor, pl: Placement) -> torch.Tensor:
    """Logical ``ids [T, K]`` (-1 = none) -> physical slots, spreading rows over replicas."""
    t, k = ids.shape
    safe = ids.clamp_min(0)
    slot_of_row = torch.arange(t, device=ids.device)[:, None] + torch.arange(k, device=ids.device)
    rep = slot_of_row % pl.replicas.to(ids.device)[safe]
    phys = pl.table.to(ids.device)[safe, rep]
    return torch.where(ids >= 0, phys, torch.full_like(ids, -1))


def physical_weights(w: MoEWeights, pl: Placement) -> MoEWeights:
    """Expert weights in physical-slot order (router and shared experts unchanged)."""
    idx = pl.phys_to_log.to(w.w_gate.device)
    return replace(w, w_gate=w.w_gate[idx], w_up=w.w_up[idx], w_down=w.w_down[idx])
