"""The KV-pool knob: each engine's memory fraction sizes its KV pool by its own rule
(SGLang's static fraction, vLLM's GPU utilisation, TensorRT-LLM's free-memory share), the
default is the engine's own, the launch files carry the fraction, and a fraction outside
(0, 1) or too small for the weights is one line (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_run import run_main
from moeplan.backends import backend
from moeplan.backends.base import MemoryContext
from moeplan.backends.sglang import default_mem_fraction_static
from moeplan.cost import memory as mem
from moeplan.export.constraints import SGLANG_PINNED, VLLM_PINNED, Target, _unknown, flags
from moeplan.export.sglang import sglang_args
from moeplan.export.vllm import vllm_args
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.knobs import MEM_FRACTIONS, engine_config, kv_pool, mem_fraction_values
from moeplan.serve.layout import kv_capacity_tokens
from moeplan.specs import load_cluster, load_model

QWEN, V3 = load_model("qwen3-30b-a3b"), load_model("deepseek-v3")
H100, H200 = load_cluster("h100-sxm-8"), load_cluster("h200-sxm-8")
TP2 = Layout(attn_tp=2, attn_dp=1, moe_tp=2, moe_ep=1)
DP8 = Layout(attn_tp=1, attn_dp=8, moe_tp=1, moe_ep=8)
GIB = 1024**3


def test_sglang_default_follows_its_memory_hook():
    """Hand-computed from memory_hook.py (MiB): ``(gpu_mem - reserved) / gpu_mem``.
    H200 (144,384 MiB), tp 8, DP attention 8, MLA, chunk 8192, colocated: 512 + 8192 x 1.5 +
    8/8 x 1024 + 512 x 2 + 512 x 8 x 3 + 512 x 8 x 1.5 + 1536 = 34,816 -> 0.759.
    H100 (81,920 MiB), tp 2, no DP attention, GQA: 512 + 12,288 + 256 + 256 x 2 = 13,568
    (above the 10 GiB floor) -> 0.834. A decode server of tp 16 x DP 8 with DeepEP: its
    activation tokens are max(512, 2048) = 2048: 512 + 3072 + 2048 + 1024 + 12,288 + 6144 =
    25,088, + 2048 DeepEP = 27,136 -> 0.812."""
    dp8 = MemoryContext(gpu=H200.gpu, tp=8, attn_dp=8, chunk=8192, mla=True)
    assert default_mem_fraction_static(dp8) == 0.759
    tp2 = MemoryContext(gpu=H100.gpu, tp=2, chunk=8192)
    assert default_mem_fraction_static(tp2) == 0.834
    dec = MemoryContext(gpu=H200.gpu, tp=16, attn_dp=8, mla=True, deepep=True, role="decode")
    assert default_mem_fraction_static(dec) == 0.812
    assert engine_config("sglang", QWEN, H100, TP2).mem_fraction == 0.834


def test_vllm_and_trtllm_defaults_are_their_constants():
    assert engine_config("vllm", QWEN, H100, TP2).mem_fraction == 0.9
    assert backend("trtllm").default_mem_fraction == 0.9


def test_the_vllm_default_pool_is_its_profile_closed_form():
    """vLLM's pool (v1/worker/gpu_worker.py ``determine_available_memory``) by hand:
    ``0.9 G`` less the weights, the larger of the step's activations and the dummy sampler
    run's logits (28 bytes x min(1024 sequences, 8192 tokens) x the 151,936-word vocabulary
    on an H100) and the profiled non-torch memory (0.2 GiB), over the per-token KV."""
    cfg = engine_config("vllm", QWEN, H100, TP2)
    shape = TP2.memory_shape(QWEN)
    weights = mem.stage_weights(QWEN, shape, range(QWEN.num_layers), True, True)
    act, buf = mem.step_bytes(QWEN, shape, 8192)
    sampler = 28 * 1024 * 151_936
    assert QWEN.vocab_size == 151_936 and sampler > act + buf
    per_token = QWEN.num_layers * mem.kv_bytes_per_token_layer(QWEN, 2)
    pool = 0.9 * H100.gpu.mem_bytes - weights - sampler - 0.2 * GIB
    assert cfg.kv_tokens_per_rank == int(pool // per_token)
    # the same GPU's whole pool without an engine rule charges the 4 GiB reserve instead
    whole = kv_capacity_tokens(QWEN, H100, TP2, 8192)
    rest = H100.gpu.mem_bytes - weights - act - buf - mem.RESERVED_BYTES
    assert whole == int(rest // per_token)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(mem.POOL_RULES),
    st.floats(min_value=0.05, max_value=0.99),
    st.floats(min_value=0.05, max_value=0.99),
)
def test_kv_tokens_grow_with_the_fraction(rule, a, b):
    """More of the GPU to the pool never shrinks it; a static fraction that leaves too little
    for a step and the graphs holds none, and so does every larger one."""
    lo, hi = sorted((a, b))
    shape = TP2.memory_shape(QWEN)
    headroom = 1.2 * GIB if rule == "static" else 0.0
    got = [
        mem.kv_capacity(QWEN, shape, H100.gpu.mem_bytes, 8192, 0, mem.KVPool(rule, f, headroom))[0]
        for f in (lo, hi)
    ]
    if got[1] > 0:
        assert got[0] <= got[1], (rule, lo, hi, got)
    elif rule == "static" and got[0] > 0:
        free = H100.gpu.mem_bytes - mem.RESERVED_BYTES
        act, buf = mem.step_bytes(QWEN, shape, 8192)
        assert act + buf + headroom > (1 - hi) * free  # refused for the headroom only


def test_the_flag_changes_the_pool_each_engine_sizes():
    for e in ("sglang", "vllm"):
        small = engine_config(e, QWEN, H100, TP2, mem_fraction=0.6).kv_tokens_per_rank
        big = engine_config(e, QWEN, H100, TP2, mem_fraction=0.8).kv_tokens_per_rank
        assert 0 < small < big


def test_plan_searches_the_default_and_a_stated_grid_up_to_the_engines_maximum():
    assert mem_fraction_values("sglang", None) == (None, *MEM_FRACTIONS)
    assert mem_fraction_values("vllm", 0.7) == (0.7,)
    assert all(f <= backend("vllm").max_mem_fraction for f in MEM_FRACTIONS)
    pool = kv_pool("sglang", V3, H200, DP8, 8192, None)
    assert pool is not None and pool.fraction == 0.759 and pool.rule == "static"


TARGET = Target(architecture="Qwen3MoeForCausalLM", num_experts=128, gpu="h100-sxm", gpu_sm=90,
                gpu_nccl=True, gpu_deepep=True, intra="nvswitch", inter="ib", num_nodes=1,
                gpus_per_node=8)  # fmt: skip


def test_the_launch_files_carry_the_fraction():
    k = InstanceKnobs(mem_fraction=0.834)
    s = sglang_args(TP2, model_path="m", target=TARGET, num_nodes=1, knobs=k).args
    v = vllm_args(TP2, model_path="m", target=TARGET, num_nodes=1, knobs=k).args
    assert s[s.index("--mem-fraction-static") + 1] == "0.834"
    assert v[v.index("--gpu-memory-utilization") + 1] == "0.834"
    # flags of the pinned releases (export/constraints.py), not refused as unknown
    assert not _unknown(flags(s), SGLANG_PINNED) and not _unknown(flags(v), VLLM_PINNED)
    plain = sglang_args(TP2, model_path="m", target=TARGET, num_nodes=1, knobs=InstanceKnobs())
    assert "--mem-fraction-static" not in plain.args


SERVE = ("serve-sim", "--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8", "--attn-tp", "2",
         "--moe-tp", "2", "--isl", "1024", "--osl", "64", "--requests", "40", "--rate", "2")  # fmt: skip


@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.2"])
def test_a_fraction_outside_0_1_is_one_line(capsys, value):
    rc, out, err = run_main(capsys, *SERVE, "--mem-fraction", value)
    assert rc == 2 and out == ""
    assert (
        err.strip().count("\n") == 0 and f"--mem-fraction ({float(value)}) must be in (0, 1)" in err
    )


def test_plan_refuses_a_fraction_outside_0_1_and_writes_nothing(capsys, tmp_path: Path):
    out_dir = tmp_path / "o"
    rc, _, err = run_main(capsys, "plan", "--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8",
                          "--mem-fraction", "1.0", "--out", str(out_dir))  # fmt: skip
    assert rc == 2 and "--mem-fraction (1.0) must be in (0, 1)" in err
    assert not out_dir.exists()


def test_a_fraction_too_small_for_the_weights_names_the_fraction_and_the_need(capsys):
    rc, _, err = run_main(capsys, *SERVE, "--mem-fraction", "0.05", "--engine", "vllm")
    assert rc == 2
    assert "--mem-fraction (0.05) leaves layout" in err
    assert "GiB per GPU before any KV cache" in err


def test_the_scheduler_search_tries_each_fraction_and_a_given_one_alone():
    from moeplan.serve.knobs import candidates

    tried = candidates("sglang", QWEN, H100, TP2, fractions=MEM_FRACTIONS)
    # SGLang's default follows the chunk (1.5 MiB per token): 0.875 at 2048, 0.684 at 16384
    assert {c.mem_fraction for c in tried if c.chunk_tokens == 2048} == {0.875}
    tried = [c for c in tried if c.chunk_tokens == 8192]
    assert {c.mem_fraction for c in tried} == {0.834, *MEM_FRACTIONS}
    pools = {c.mem_fraction: c.kv_tokens_per_rank for c in tried}
    assert pools[0.8] < pools[0.834] < pools[0.85] < pools[0.95]
    given = candidates("vllm", QWEN, H100, TP2, mem_fraction=0.7)
    assert {c.mem_fraction for c in given} == {0.7}
