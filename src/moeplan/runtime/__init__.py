"""Runtime: execute a :class:`~moeplan.planners.plan.Plan` on ``torch.distributed``.

Layout (docs/RUNTIME.md):

- :mod:`.mesh` — pure rank arithmetic of a plan (no torch; planners and tests use it).
- :mod:`.layers` — the model on one device (routing, permutation, MoE, attention, weights) and
  the one layer loop with its single-process layout (:mod:`.layers.decoder`).
- :mod:`.comm` — process groups and collectives (EP all-to-all, MixServe fused, Sem-MoE shuffled).
- :mod:`.kernels` — Triton kernels on CUDA with vectorised torch fallbacks.
- :mod:`.engines` — one engine per layout, found by family in :data:`.engines.FAMILY_ENGINES`; each
  applies its parallel layout to the shared layer loop.
- :mod:`.runner` — validate, build the engine, run, check against the reference, trace;
  :mod:`.options`, :mod:`.config`, :mod:`.timeline`; :mod:`.spawn` / :mod:`.launch` start ranks.

torch is imported only by the submodules that need it.
"""
