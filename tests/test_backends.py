"""Engine backends (moeplan.backends): the registry, today's engines' decisions, and a new
engine added as one record — registered here, for the test only — reaching the scheduler
defaults, the memory budget and the DeepEP gate without any other module changing."""

from __future__ import annotations

import dataclasses

import pytest

from moeplan import backends
from moeplan.backends import EngineBackend, backend
from moeplan.backends.vllm import is_a100
from moeplan.cost.a2a import deepep_blockers
from moeplan.errors import MoeplanError
from moeplan.serve.knobs import default_chunk, engine_config
from moeplan.serve.layout import Layout, kv_capacity_tokens
from moeplan.specs import load_cluster, load_model
from moeplan.specs.gpu import gpu_from_record
from moeplan.specs.presets import cluster_table

MODEL = load_model("qwen3-30b-a3b")
H100 = load_cluster("h100-sxm-8")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FakeBackend(EngineBackend):
    """An engine with a fixed 4096-token chunk and 64 sequences per DP rank."""

    def default_chunk(self, gpu):
        return 4096

    def default_running(self, gpu):
        return 64

    def chunk_args(self, chunk_tokens, attn_dp):
        return []  # a fake engine exports nothing

    def knob_args(self, knobs, role="colocated"):
        return []


FAKE = FakeBackend(
    name="fake",
    label="Fake",
    kernel_table="sglang",
    scheduler="mixed",
    budgets_per_dp_rank=True,
    chunk_above_running=True,
)


@pytest.fixture
def fake_engine(monkeypatch):
    """The fake engine in the registry for one test (monkeypatch restores it)."""
    monkeypatch.setitem(backends.BACKENDS, FAKE.name, FAKE)
    yield FAKE
    assert FAKE.name in backends.BACKENDS  # removed by monkeypatch after the test


def test_a_new_engine_is_one_record(fake_engine):
    """Registered, the fake engine is a CLI choice and drives the scheduler model it names
    with its own defaults, and its memory budget is its own chunk."""
    assert "fake" in backends.names() and "fake" in backends.simulated()
    assert "fake" not in backends.exported()  # no launch_module: not exported
    lay = Layout(attn_dp=2, moe_ep=2)
    cfg = engine_config("fake", MODEL, H100, lay)
    assert cfg.policy == "mixed"
    assert cfg.max_running == 64 * 2
    assert cfg.chunk_tokens == 4096 * 2
    assert cfg.kv_tokens_per_rank == kv_capacity_tokens(MODEL, H100, lay, 4096)
    assert default_chunk("fake", H100) == 4096
    # no DeepEP path: the gate names the engines that have one
    why = deepep_blockers("fake", MODEL, H100, 1, 8)
    assert why[0] == "engine fake has no DeepEP path moeplan prices (sglang, vllm)"


def test_the_fake_engine_is_gone_after_its_test():
    assert "fake" not in backends.BACKENDS
    with pytest.raises(
        MoeplanError, match=r"engine \('fake'\) must be one of sglang, vllm, trtllm"
    ):
        backend("fake")


def test_every_engine_is_simulated_and_exported():
    """SGLang, vLLM and TensorRT-LLM each have a scheduler model and a launch export."""
    assert backends.simulated() == backends.exported() == ("sglang", "vllm", "trtllm")
    assert backends.kernel_tables() == ("sglang", "vllm", "trtllm")


def test_trtllm_scheduler_is_in_flight_batching_with_its_own_budgets():
    """TensorRT-LLM: mixed batches, max_batch_size 2048 and max_num_tokens 8192 per
    attention-DP rank on every GPU, GUARANTEED_NO_EVICT (the whole output reserved)."""
    b = backend("trtllm")
    a100 = load_cluster("a100-sxm-8")
    assert b.scheduler == "mixed" and b.budgets_per_dp_rank and b.chunk_above_running
    for c in (H100, a100):
        assert (b.default_chunk(c.gpu), b.default_running(c.gpu)) == (8192, 2048)
    lay = Layout(attn_dp=4, moe_ep=4)
    cfg = engine_config("trtllm", MODEL, H100, lay)
    assert (cfg.policy, cfg.chunk_tokens, cfg.max_running) == ("mixed", 4 * 8192, 4 * 2048)
    assert cfg.admit_reserve == 1.0
    assert engine_config("vllm", MODEL, H100, lay).admit_reserve == 0.0


def test_trtllm_kv_pool_is_its_free_memory_fraction():
    """The KV pool is free_gpu_memory_fraction (0.9) of the memory the weights and a
    max_num_tokens step leave; vLLM's 0.9 utilisation is of the whole GPU, so its pool is
    smaller than all the free memory by 0.1 of the GPU."""
    b = backend("trtllm")
    assert b.default_mem_fraction == 0.9
    lay = Layout(attn_tp=2, moe_ep=2)
    free = kv_capacity_tokens(MODEL, H100, lay, 8192)
    assert engine_config("trtllm", MODEL, H100, lay).kv_tokens_per_rank == int(0.9 * free)
    assert engine_config("vllm", MODEL, H100, lay).kv_tokens_per_rank < free


def test_trtllm_capabilities():
    """Attention DP where the feature matrix says Yes; DeepSeek-V2 (AutoDeploy only) and
    MiniMax-M3 (sparse class only) have no PyTorch-backend class; no DeepEP priced."""
    b = backend("trtllm")
    assert b.attn_dp_blocker("DeepseekV3ForCausalLM") is None
    assert b.attn_dp_blocker("Qwen3MoeForCausalLM") is None
    why = b.attn_dp_blocker("MixtralForCausalLM")
    assert why is not None and "enable_attention_dp" in why
    assert b.model_class_blocker("DeepseekV2ForCausalLM") is not None
    assert b.model_class_blocker("MiniMaxM3ForCausalLM") is not None
    assert b.model_class_blocker("Qwen3MoeForCausalLM") is None
    assert deepep_blockers("trtllm", MODEL, H100, 1, 8)
    assert "attention TP2 x DP4" in b.layout_blocker(2, 4, 1, 8)
    assert b.layout_blocker(1, 8, 1, 8) is None and b.layout_blocker(8, 1, 2, 4) is None
    assert backend("sglang").layout_blocker(2, 4, 1, 8) is None
    assert b.wideep_moe_op == "trtllm_wideep_moe" and not b.shares_wideep_tables


def test_vllm_a100_rule_reads_the_gpu_record():
    """vLLM tests its device name for "a100"; the record's compute capability gives the same
    answer for every shipped GPU, and only the A100 loses the large defaults at >= 70 GiB."""
    gib = 1024**3
    gpus = [gpu_from_record(n, r) for n, r in cluster_table()["gpus"].items()]
    assert len(gpus) >= 10
    for gpu in gpus:
        large = gpu.mem_bytes >= 70 * gib
        assert (large and is_a100(gpu)) == (large and "a100" in gpu.name.lower()), gpu.name
    a100 = load_cluster("a100-sxm-8").gpu
    assert a100.mem_bytes >= 70 * gib and is_a100(a100)
    assert backend("vllm").default_chunk(a100) == 2048
    assert backend("vllm").default_chunk(H100.gpu) == 8192
    assert backend("sglang").default_chunk(a100) == 8192
