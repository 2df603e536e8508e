"""``moeplan trace synth``'s generator settings for a model: its MoE layers, experts, top-k,
vocabulary and semantic groups (:mod:`moeplan.traces.synthetic`).
"""

from __future__ import annotations

from moeplan.specs import ModelSpec
from moeplan.traces.synthetic import SynthConfig


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
