"""Fast MoE index and data-movement kernels: Triton on CUDA, vectorised torch elsewhere.

- :mod:`.positions`: stable counting-sort positions (the core of the index build).
- :mod:`.permute`: variable-k permutation (SMIDT's dynamic top-k), row gather, weighted combine,
  and the :class:`~.permute.Permutation` layout they share with the reference.
- :mod:`.grouped`: grouped SwiGLU experts over the permuted rows (one GEMM launch per
  projection on CUDA bf16 via ``torch._grouped_mm``, padded ``bmm`` otherwise).

This package is a leaf: it imports torch (and Triton on CUDA), nothing else of moeplan. The
runtime's layers (:mod:`moeplan.runtime.layers`) call it: the padded ``bmm`` of
:func:`grouped_swiglu` everywhere, and :func:`permute` / :func:`gather_rows` / :func:`combine`
on CUDA when :func:`triton_enabled` (the CPU path keeps the reference). Every public function
returns what the reference returns (same dataclasses); ``tests/test_kernels_*.py`` check it.
Sem-MoE's token shuffle plan is not here: the runtime uses the planner's pure one
(:func:`moeplan.planners.placement.sched.token_plan`, see :mod:`moeplan.runtime.comm.shuffle`).
"""

from moeplan.runtime.kernels._backend import triton_enabled
from moeplan.runtime.kernels.grouped import grouped_moe, grouped_swiglu, loop_moe, swiglu
from moeplan.runtime.kernels.permute import Permutation, combine, gather_rows, permute
from moeplan.runtime.kernels.positions import stable_positions

__all__ = [
    "Permutation",
    "combine",
    "gather_rows",
    "grouped_moe",
    "grouped_swiglu",
    "loop_moe",
    "permute",
    "stable_positions",
    "swiglu",
    "triton_enabled",
]
