"""Per-model launch facts that are not one engine's, and SGLang's EP-size rule, as data with
their sources. Each engine's own facts (attention DP per architecture, the model classes its
pinned release lacks, the layer-partition variable of a pipeline, the chunk it needs) are its
backend's (:mod:`moeplan.backends`).

- **Remote code.** A Hugging Face repository whose ``config.json`` has ``auto_map`` ships its
  own configuration/model/tokenizer classes, which transformers' ``AutoConfig`` /
  ``AutoTokenizer`` load only with ``trust_remote_code=True`` (transformers
  ``dynamic_module_utils.resolve_trust_remote_code``); SGLang and vLLM pass
  ``--trust-remote-code`` through to them (e.g. Kimi-K2's tiktoken tokenizer,
  ``tokenization_kimi.py``). :func:`needs_remote_code` reads the config dict.
- **DeepEP** per engine: the backend's capability table
  (:meth:`moeplan.backends.EngineBackend.deepep_blocker`, one set of facts with the cost model)
  and the GPUs' compute capabilities in the cluster presets' GPU records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moeplan.backends.sglang import VERSION as SGLANG_VERSION

#: architectures whose SGLang 0.5.23 default MoE runner is flashinfer_cutlass
#: (arg_groups/model_overrides/nemotron_h.py), which accepts ep_size 1 or tp_size only
#: (arg_groups/moe_hook.py). On SM100 without an all-to-all backend the override picks
#: flashinfer_trtllm instead, but the resolution with CUDA faked as SM100 still picked
#: flashinfer_cutlass (bench/check_exports.py), so the rule is applied on every GPU
SGLANG_EP_IS_TP = frozenset({"NemotronHForCausalLM"})


def sglang_ep_blocker(architecture: str, tp: int, ep: int, sm: int | None, a2a: str) -> str | None:
    """Why SGLang 0.5.23's default MoE runner refuses ``ep`` for ``architecture``."""
    del sm, a2a  # kept for the SM100 case once it is confirmed (SGLANG_EP_IS_TP)
    if architecture not in SGLANG_EP_IS_TP or ep in (1, tp):
        return None
    return (
        f"SGLang {SGLANG_VERSION} runs {architecture}'s MoE with flashinfer_cutlass, which "
        f"needs ep_size 1 or tp_size ({ep} of {tp}; arg_groups/model_overrides/nemotron_h.py, "
        "moe_hook.py)"
    )


def needs_remote_code(config: Mapping[str, Any] | None) -> bool:
    """Whether a checkpoint with this ``config.json`` needs ``--trust-remote-code``."""
    return bool(config) and bool(config.get("auto_map"))  # type: ignore[union-attr]
