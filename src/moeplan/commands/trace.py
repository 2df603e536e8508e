"""``moeplan trace``'s answers: ``synth``'s generator settings for a model (its MoE layers,
experts, top-k, vocabulary and semantic groups, :mod:`moeplan.traces.synthetic`) and what
``import`` says of the trace or the per-expert load it read; the checked path a trace goes to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from moeplan.errors import require
from moeplan.specs import ModelSpec
from moeplan.traces.format import RoutingTrace
from moeplan.traces.synthetic import SynthConfig


def check_trace_path(out: Path) -> None:
    """``--out`` of a routing trace: a file name ending in .npz or .parquet."""
    require(out.suffix in (".npz", ".parquet"), f"--out ({out}) must end in .npz or .parquet")
    require(not out.is_dir(), f"--out ({out}) is a directory; give a file name")


def synth_config(m: ModelSpec, requests: int, seed: int) -> SynthConfig:
    """The synthetic trace's settings for model ``m``: ``requests`` requests, ``seed``."""
    return SynthConfig(
        num_layers=m.num_moe_layers,
        num_experts=m.num_experts,
        top_k=m.top_k,
        vocab_size=min(m.vocab_size, 32000),
        num_requests=requests,
        seed=seed,
        num_groups=_groups(m.num_experts),
    )


def _groups(num_experts: int) -> int:
    """Largest divisor of E that is <= 16 (semantic groups of the generator)."""
    return max(g for g in range(1, 17) if num_experts % g == 0)


def trace_info(tr: RoutingTrace) -> dict[str, Any]:
    """A routing trace's size: token occurrences, MoE layers, experts and top-k."""
    return {
        "occurrences": tr.num_tokens,
        "layers": tr.num_layers,
        "experts": tr.num_experts,
        "top_k": tr.top_k,
    }


def load_info(load: Any) -> dict[str, int]:
    """A per-expert load's size (``load``: [layers, experts] counts)."""
    return {"layers": int(load.shape[0]), "experts": int(load.shape[1])}
