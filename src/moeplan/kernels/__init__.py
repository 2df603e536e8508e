"""Fast MoE index and data-movement kernels: Triton on CUDA, vectorised torch elsewhere.

- :mod:`.positions`: stable counting-sort positions (the core of both index builds).
- :mod:`.permute`: variable-k permutation (SMIDT's dynamic top-k), row gather, weighted combine.
- :mod:`.grouped`: grouped SwiGLU experts over the permuted rows (one GEMM launch per
  projection on CUDA bf16 via ``torch._grouped_mm``, padded ``bmm`` otherwise).
- :mod:`.shuffle`: Sem-MoE's token-shuffle plan (argsort by device, group, pad).

Every public function returns exactly what the reference in :mod:`moeplan.runtime` returns
(same dataclasses), so callers can swap them in. :func:`triton_enabled` says which backend runs.
"""

from moeplan.kernels._backend import triton_enabled
from moeplan.kernels.grouped import grouped_moe, grouped_swiglu
from moeplan.kernels.permute import combine, gather_rows, permute
from moeplan.kernels.positions import stable_positions
from moeplan.kernels.shuffle import token_plan

__all__ = ["combine", "gather_rows", "grouped_moe", "grouped_swiglu", "permute",
           "stable_positions", "token_plan", "triton_enabled"]
