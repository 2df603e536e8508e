"""Runtime model configuration: the few ``ModelSpec`` fields the runtime executes.

:func:`from_model_spec` maps a :class:`moeplan.specs.ModelSpec` (docs/API.md) to a
:class:`MoEConfig`, optionally shrunk (``scale="small"``) so CPU tests run in milliseconds while
keeping the routing structure: the grouped-routing shape (``n_group``/``topk_group``), the
scoring function, shared experts and top-k are preserved; widths and counts shrink.
Sigmoid scoring with a correction bias is used for DeepSeek-V3-style models (architecture name
containing ``V3`` or a ``scoring_func`` attribute of ``"sigmoid"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from moeplan.errors import MoeplanError, require


@dataclass(frozen=True, kw_only=True, slots=True)
class MoEConfig:
    """Shapes and routing of the model the runtime executes. Layers listed in ``dense_layers``
    have a dense SwiGLU MLP instead of an MoE block (DeepSeek's ``first_k_dense_replace``)."""

    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    num_experts: int = 8
    top_k: int = 2
    moe_intermediate_size: int = 32
    shared_intermediate_size: int = 0
    scoring: str = "softmax"
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    norm_topk_prob: bool = True
    top_p: float | None = None
    k_min: int = 1
    dense_layers: tuple[int, ...] = ()
    dense_intermediate_size: int = 64

    def __post_init__(self) -> None:
        require(
            self.hidden_size % self.num_heads == 0,
            f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})",
        )
        require(
            self.num_experts % self.n_group == 0,
            f"num_experts ({self.num_experts}) must be divisible by n_group ({self.n_group})",
        )
        require(
            1 <= self.top_k <= self.num_experts,
            f"top_k ({self.top_k}) must be in [1, num_experts={self.num_experts}]",
        )
        require(
            self.scoring in ("softmax", "sigmoid"),
            f"scoring ({self.scoring}) must be softmax or sigmoid",
        )
        require(self.num_layers >= 1, f"num_layers ({self.num_layers}) must be >= 1")


_SMALL: dict[str, Any] = {
    "hidden_size": 64,
    "num_heads": 8,
    "num_layers": 2,
    "moe_intermediate_size": 32,
}


def from_model_spec(spec: Any, scale: str = "small", *, num_layers: int | None = None) -> MoEConfig:
    """Runtime config from a ``ModelSpec``; ``scale`` is ``"small"`` or ``"full"``."""
    require(scale in ("small", "full"), f"scale ({scale}) must be small or full")
    arch = str(getattr(spec, "architecture", ""))
    sigmoid = getattr(spec, "scoring_func", None) == "sigmoid" or "V3" in arch or "v3" in arch
    n_group = max(1, int(getattr(spec, "n_group", 1) or 1))
    topk_group = max(1, int(getattr(spec, "topk_group", 1) or 1))
    experts, top_k = int(spec.num_experts), int(spec.top_k)
    shared_n = int(getattr(spec, "num_shared_experts", 0) or 0)
    if experts <= 0:
        raise MoeplanError(f"model.num_experts ({experts}) must be > 0 to run an MoE layer")
    if scale == "full":
        shared = int(getattr(spec, "shared_intermediate_size", 0) or 0)
        return MoEConfig(
            hidden_size=spec.hidden_size,
            num_heads=spec.num_attention_heads,
            num_layers=num_layers or spec.num_moe_layers,
            num_experts=experts,
            top_k=top_k,
            moe_intermediate_size=spec.moe_intermediate_size,
            shared_intermediate_size=shared,
            scoring="sigmoid" if sigmoid else "softmax",
            n_group=n_group,
            topk_group=topk_group,
            routed_scaling_factor=float(getattr(spec, "routed_scaling_factor", 1.0) or 1.0),
        )
    small_experts = min(experts, 16)
    n_group = math.gcd(n_group, small_experts)
    topk_group = min(topk_group, n_group)
    top_k = min(top_k, topk_group * small_experts // n_group)
    return MoEConfig(
        **{**_SMALL, "num_layers": num_layers or _SMALL["num_layers"]},
        num_experts=small_experts,
        top_k=top_k,
        shared_intermediate_size=32 * shared_n,
        scoring="sigmoid" if sigmoid else "softmax",
        n_group=n_group,
        topk_group=topk_group,
        routed_scaling_factor=float(getattr(spec, "routed_scaling_factor", 1.0) or 1.0),
    )
