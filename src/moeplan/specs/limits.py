"""Upper bounds on model sizes: beyond any real model, checked before anything is allocated.

Shared by the config reader (:mod:`moeplan.specs.hf_config`) and :class:`ModelSpec`
(:mod:`moeplan.specs.model`); a value past a bound is one error line naming it.
"""

# Upper bounds on a model's shape: ~10x beyond any released model (see the module docstring).
MAX_LAYERS = 1024
MAX_HIDDEN = 2**20
MAX_EXPERTS = 65536
MAX_VOCAB = 2**24
MAX_HEADS = 8192
MAX_HEAD_DIM = 2**14
MAX_INTERMEDIATE = 2**22
MAX_CONTEXT = 2**30  # tokens (sliding windows)
MAX_ROUTED_SCALE = 1000.0  # routed_scaling_factor (DeepSeek-V2: 16, Kimi-K2: 2.827)
MAX_WEIGHT_BYTES = 8.0  # bytes per parameter (fp64)
