"""Workload and RoutingProfile: what is served, and how tokens pick experts.

A :class:`RoutingProfile` is static top-k (every token picks ``top_k`` experts), or per-layer
mean activated experts (dynamic top-k, SMIDT), or per-layer expert load fractions (from a
trace, Sem-MoE/EPLB), or both. Layer indices are indices into the model's MoE layers
(0 = first MoE layer), not decoder-layer numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moeplan.errors import require

PHASES = ("prefill", "decode", "both")


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutingProfile:
    """Routing statistics per MoE layer."""

    top_k: int
    mean_k: tuple[float, ...] | None = None
    expert_load: tuple[tuple[float, ...], ...] | None = None
    source: str = "static"

    def __post_init__(self) -> None:
        require(self.top_k >= 1, f"routing.top_k ({self.top_k}) must be >= 1")
        if self.mean_k is not None:
            require(len(self.mean_k) >= 1, "routing.mean_k must not be empty")
            for i, k in enumerate(self.mean_k):
                require(k > 0, f"routing.mean_k[{i}] ({k}) must be positive")
        if self.expert_load is not None:
            for i, row in enumerate(self.expert_load):
                require(len(row) > 0 and min(row) >= 0 and sum(row) > 0,
                        f"routing.expert_load[{i}] must be non-negative with a positive sum")

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
            row = tuple(sum(row[g * size:(g + 1) * size]) for g in range(groups))
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
        require(self.phase in PHASES, f"workload.phase ({self.phase!r}) must be one of {PHASES}")
        require(self.batch >= 1, f"workload.batch ({self.batch}) must be >= 1")
        require(self.isl >= 1, f"workload.isl ({self.isl}) must be >= 1")
        require(self.osl >= 0, f"workload.osl ({self.osl}) must be >= 0")
        require(self.rate is None or self.rate > 0,
                f"workload.rate ({self.rate}) must be positive")

    def routing_for(self, top_k: int) -> RoutingProfile:
        """The routing profile, or static ``top_k`` routing when none was given."""
        return self.routing if self.routing is not None else RoutingProfile.static(top_k)
