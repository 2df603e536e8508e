"""TensorRT-LLM: what moeplan has of it today — its measured kernel tables only.

Its kernels price a cost model (``--engine trtllm`` on the cost commands), including its own
wide-EP MoE kernel (CUTLASS MoE on a rank's slots, both phases: ``trtllm_wideep_moe``). It has
no scheduler model (the serving simulation refuses it), no DeepEP path moeplan prices and no
launch export.

The strategy planner's memory check sizes activations by a default prefill chunk; for a
TensorRT-LLM-priced cost model it uses SGLang's GPU-memory rule
(:meth:`moeplan.backends.sglang.SGLangBackend.default_chunk`), not a TensorRT-LLM default.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.backends.base import EngineBackend
from moeplan.backends.sglang import SGLANG
from moeplan.specs import GPUSpec


@dataclass(frozen=True, kw_only=True)
class TRTLLMBackend(EngineBackend):
    """TensorRT-LLM (module docstring): kernel tables only."""

    def default_chunk(self, gpu: GPUSpec) -> int:
        return SGLANG.default_chunk(gpu)


TRTLLM = TRTLLMBackend(
    name="trtllm",
    label="TensorRT-LLM",
    kernel_table="trtllm",
    wideep_moe_op="trtllm_wideep_moe",
    # tensorrt_llm/llmapi/llm_args.py KvCacheConfig ``free_gpu_memory_fraction`` (default
    # 0.9): the share of the memory free after weights and activations given to the KV cache
    mem_fraction_rule="free",
    default_mem_fraction=0.9,
)
