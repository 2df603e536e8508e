"""Sem-MoE placement types: the knobs (:class:`PlaceConfig`) and what :func:`.planner.place`
returns (:class:`PlacementResult`), plus the SGLang physical-to-logical map of a placement.

Split out of :mod:`.planner` so the evaluation pass (:mod:`.evaluate`) and the planner share
them without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from moeplan.errors import require
from moeplan.planners.placement.affinity import MarkovTable

METHODS = ("contiguous", "eplb", "transition", "semmoe")


@dataclass(frozen=True, kw_only=True, slots=True)
class PlaceConfig:
    """Knobs of :func:`place` (defaults are the CLI's)."""

    ep: int
    mode: str = "dp"
    baselines: bool = True
    test_fraction: float = 0.25
    val_fraction: float = 0.2
    seed: int = 0
    max_tokens: int = 4096
    slack: float = 0.05
    balance_tol: float = 1.03
    step_tokens: int = 8192
    lookback: int = 1
    guard: bool = True
    redundant: int = 0  # extra expert slots per device (Sem-MoE and EPLB)

    def __post_init__(self) -> None:
        require(self.ep >= 1, f"ep ({self.ep}) must be >= 1")
        require(self.mode in ("dp", "tp"), f"mode ({self.mode!r}) must be 'dp' or 'tp'")
        require(self.balance_tol >= 1.0, f"balance_tol ({self.balance_tol}) must be >= 1")
        require(self.lookback in (1, 2), f"lookback ({self.lookback}) must be 1 or 2")
        require(self.redundant >= 0, f"redundant ({self.redundant}) must be >= 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class MethodResult:
    name: str
    y: np.ndarray  # [L, E] device of each logical expert (its primary copy)
    metrics: dict[str, Any]
    replicas: np.ndarray | None = None  # [L, E, C] copies per device with redundant slots


@dataclass(frozen=True, kw_only=True, slots=True)
class PlacementResult:
    """Placements, tables and metrics of every method."""

    ep: int
    mode: str
    methods: dict[str, MethodResult]
    solve_s: float
    token_ids: np.ndarray  # [V]
    token_conf: np.ndarray  # [V, C] P(device | token): the request-scheduling table
    layer_device: np.ndarray  # [L, V] token -> device per layer (attention-TP)
    layer_conf: np.ndarray  # [L, V]
    markov: MarkovTable | None
    objective: dict[str, float]
    fallback: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary (``moeplan place --json``)."""
        return {
            "ep": self.ep,
            "mode": self.mode,
            "solve_s": self.solve_s,
            "fallback": self.fallback,
            "objective": self.objective,
            "methods": {k: v.metrics for k, v in self.methods.items()},
            **self.extra,
        }


def physical_to_logical(y: np.ndarray, ep: int) -> np.ndarray:
    """[L, P] physical slot -> logical expert: device 0's experts (ascending), device 1's...

    ``y`` is [L, E] (one copy each, P = E) or replica counts [L, E, C] (P = E + redundant)."""
    if y.ndim == 2:
        return np.stack(
            [np.argsort(yl * yl.shape[0] + np.arange(len(yl)), kind="stable") for yl in y]
        )
    rep = y.astype(np.int64)
    per = rep.sum(axis=1)  # [L, C]
    require(
        bool((per == per[0, 0]).all()),
        f"replicas per device ({per.min()}..{per.max()}) must be equal on every device",
    )
    return np.stack(
        [
            np.concatenate(
                [np.repeat(np.arange(rep.shape[1]), rep[layer, :, c]) for c in range(ep)]
            )
            for layer in range(rep.shape[0])
        ]
    )
