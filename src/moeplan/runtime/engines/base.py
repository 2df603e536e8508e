"""What every engine provides to the runner (:class:`Engine`) and what it is given (:class:`RunContext`).

An engine is built for one (mesh, model config) pair by its family's factory in
:data:`moeplan.runtime.engines.FAMILY_ENGINES`; building validates everything that can be checked
without a process group (the runner calls it on every rank before any collective, and the CLI
once before spawning). The engine then says how the global inputs split over ranks
(:meth:`Engine.local_input`) and runs its layout (:meth:`Engine.run`), usually by handing a
:class:`~moeplan.runtime.layers.decoder.Layout` to the shared layer loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from moeplan.errors import require
from moeplan.runtime.comm.groups import RankGroups, build_groups
from moeplan.runtime.config import MoEConfig
from moeplan.runtime.layers.model import LayerWeights
from moeplan.runtime.mesh import Mesh
from moeplan.runtime.options import RunOptions
from moeplan.runtime.timeline import Timeline


@dataclass(frozen=True, kw_only=True, slots=True)
class RunContext:
    """This rank's side of one run: its groups (None for engines that use none), timeline,
    options, and ``extra`` — fields the engine adds to the rank's report."""

    rank: int
    shape: tuple[int, ...]
    """Shape of the global input ``[B, S, H]``."""
    groups: RankGroups | None
    tl: Timeline
    opts: RunOptions
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Engine(ABC):
    """One family's parallel execution of the decoder on this rank."""

    mesh: Mesh
    cfg: MoEConfig

    def global_batch(self, seq: int, tokens: int) -> int:
        """Sequences in the global batch; raises a user error when the layout cannot split it."""
        return tokens // seq

    def groups(self, rank: int) -> RankGroups | None:
        """Process groups of the mesh (collective: every rank calls it)."""
        return build_groups(self.mesh, rank)

    @abstractmethod
    def local_input(self, x: torch.Tensor, rank: int) -> torch.Tensor | None:
        """This rank's share of the global input ``x [B, S, H]`` (None: it takes none)."""

    @abstractmethod
    def run(
        self, x: torch.Tensor | None, layers: list[LayerWeights], ctx: RunContext
    ) -> torch.Tensor | None:
        """Forward this rank's input through every layer; None where the rank has no output."""

    def reference_output(self, full: torch.Tensor, rank: int) -> torch.Tensor:
        """The part of the reference output this rank's output must equal."""
        out = self.local_input(full, rank)
        assert out is not None, "a rank with output has an input share"
        return out

    def calibrate(self, ctx: RunContext, device: str) -> float | None:
        """Optional measurement taken before the timed run (DEP: link latency)."""
        return None

    def predicted_trace(
        self, events: list[dict[str, Any]], link_s: float | None, measured_s: float, seq: int
    ) -> dict[str, Any] | None:
        """Optional simulator prediction of the run (Chrome trace object), rank 0 only."""
        return None


def with_layers(cfg: MoEConfig, n: int, dense: tuple[int, ...]) -> MoEConfig:
    """``cfg`` with ``n`` layers, the ones in ``dense`` dense MLPs."""
    return MoEConfig(**{**asdict(cfg), "num_layers": n, "dense_layers": dense})


def require_dp_batch(batch: int, dp: int) -> None:
    require(batch >= dp, f"tokens/seq ({batch}) must be >= attn.dp ({dp})")
