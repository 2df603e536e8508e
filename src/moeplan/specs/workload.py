"""Workload and RoutingProfile: what is served, and how tokens pick experts.

A :class:`RoutingProfile` is static top-k (every token picks ``top_k`` experts), or per-layer
mean activated experts (dynamic top-k, SMIDT), or per-layer expert load fractions (from a
trace, Sem-MoE/EPLB), or both. Layer indices are indices into the model's MoE layers
(0 = first MoE layer), not decoder-layer numbers.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

from moeplan.errors import check_float, check_int, require, show
from moeplan.specs.model import MAX_CONTEXT, MAX_EXPERTS, MAX_LAYERS

#: what a workload runs: prompts only, decode steps only, or whole requests
WORKLOAD_PHASES = ("prefill", "decode", "both")
MAX_BATCH = 2**20  # concurrent sequences (bound every size a user can type)
MAX_RATE = 1e9  # requests per second


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutingProfile:
    """Routing statistics per MoE layer."""

    top_k: int
    mean_k: tuple[float, ...] | None = None
    expert_load: tuple[tuple[float, ...], ...] | None = None
    source: str = "static"

    def __post_init__(self) -> None:
        check_int("routing.top_k", self.top_k, 1, MAX_EXPERTS)
        if self.mean_k is not None:
            require(
                isinstance(self.mean_k, tuple | list) and 1 <= len(self.mean_k) <= MAX_LAYERS,
                f"routing.mean_k ({show(self.mean_k)}) must list 1..{MAX_LAYERS} layers",
            )
            for i, k in enumerate(self.mean_k):
                check_float(f"routing.mean_k[{i}]", k, hi=MAX_EXPERTS, positive=True)
        if self.expert_load is not None:
            require(
                isinstance(self.expert_load, tuple | list) and len(self.expert_load) <= MAX_LAYERS,
                f"routing.expert_load ({show(self.expert_load)}) must list at most "
                f"{MAX_LAYERS} layers",
            )
            for i, row in enumerate(self.expert_load):
                require(
                    isinstance(row, tuple | list)
                    and 0 < len(row) <= MAX_EXPERTS
                    and all(
                        isinstance(x, numbers.Real)
                        and not isinstance(x, bool)
                        and math.isfinite(x)
                        and x >= 0
                        for x in row
                    )
                    and sum(row) > 0,
                    f"routing.expert_load[{i}] ({show(row)}) must be finite, "
                    "non-negative, with a positive sum",
                )

    @classmethod
    def static(cls, k: int) -> RoutingProfile:
        return cls(top_k=k)

    @property
    def num_layers(self) -> int | None:
        if self.mean_k is not None:
            return len(self.mean_k)
        return len(self.expert_load) if self.expert_load is not None else None

    def k(self, layer: int) -> float:
        """Mean experts activated per token in MoE layer ``layer``."""
        if self.mean_k is None:
            return float(self.top_k)
        return float(self.mean_k[layer % len(self.mean_k)])

    def imbalance(self, layer: int, groups: int = 0) -> float:
        """Max/mean load over experts (``groups`` = 0) or over ``groups`` contiguous EP ranks."""
        if self.expert_load is None:
            return 1.0
        row = self.expert_load[layer % len(self.expert_load)]
        if groups and len(row) % groups == 0:
            size = len(row) // groups
            row = tuple(sum(row[g * size : (g + 1) * size]) for g in range(groups))
        return max(row) / (sum(row) / len(row))

    def mean_over_layers(self) -> float:
        if self.mean_k is None:
            return float(self.top_k)
        return sum(self.mean_k) / len(self.mean_k)


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """Serving workload: phase, batch (concurrent sequences), prompt/output lengths, rate."""

    phase: str = "both"
    batch: int = 32
    isl: int = 2048
    osl: int = 256
    rate: float | None = None
    routing: RoutingProfile | None = field(default=None)

    def __post_init__(self) -> None:
        require(
            self.phase in WORKLOAD_PHASES,
            f"workload.phase ({show(self.phase)}) must be one of {WORKLOAD_PHASES}",
        )
        check_int("workload.batch", self.batch, 1, MAX_BATCH)
        check_int("workload.isl", self.isl, 1, MAX_CONTEXT)
        check_int("workload.osl", self.osl, 0, MAX_CONTEXT)
        if self.rate is not None:
            check_float("workload.rate", self.rate, hi=MAX_RATE, positive=True)

    def routing_for(self, top_k: int) -> RoutingProfile:
        """The routing profile, or static ``top_k`` routing when none was given."""
        return self.routing if self.routing is not None else RoutingProfile.static(top_k)
