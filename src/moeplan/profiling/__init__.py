"""torch micro-benchmarks that produce a :class:`moeplan.cost.HardwareProfile` (feeds cost).

- :mod:`.timing`: warm-up, CUDA events (``perf_counter`` + synchronize on CPU), medians over
  repeats, fresh random inputs in rotated buffers.
- :mod:`.shapes`: the GEMM and attention shapes a preset model's layers run.
- :mod:`.microbench`: GEMM, SDPA attention, grouped expert FFN, permutation, ceilings.
- :mod:`.calibrate`: measure, fit with :mod:`moeplan.cost.linear` as
  :mod:`moeplan.cost.calibrate` does (seeded 20 % held out), report R² and held-out error.
- :mod:`.moe_layer`: one MoE layer measured vs the cost model's prediction.

Only this package, :mod:`moeplan.runtime` (kernels included) import torch.
"""
