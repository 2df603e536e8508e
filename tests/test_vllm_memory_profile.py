"""vLLM's KV pool as its start-up profile sizes it, and the engines' per-request window KV:

- MXFP4 experts padded for the MoE kernel vLLM picks on the GPU (Marlin below SM90), checked
  against vLLM's own loading log of GPT-OSS-120B on the Marlin path;
- the pool charges the dummy sampler run and the profiled non-torch memory (closed form);
- sliding-window layers share the pool's blocks and hold only those over their window
  (a brute force of vLLM's block freeing);
- every engine loop charges a request's window blocks from its admission to its end, and
  frees all of it (the pool is empty after every run).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.backends import backend
from moeplan.cost import memory as mem
from moeplan.planners.layout import Layout
from moeplan.serve.engine.prefill import run_prefill_only
from moeplan.serve.engine.run import Engine
from moeplan.serve.engine.state import EngineState
from moeplan.serve.engine.unpreempted import DecodePoolEngine, NeedsPreemption, UnpreemptedEngine
from moeplan.serve.knobs import engine_config, kv_pool
from moeplan.specs import layer_math, load_cluster, load_model
from moeplan.specs.quant import BF16
from test_serve_engine_unpreempted import _priced, _streams

GIB = 1024**3
OSS120, OSS20 = load_model("gpt-oss-120b"), load_model("gpt-oss-20b")
A100, H100, B200 = (
    load_cluster("a100-sxm-8"),
    load_cluster("h100-sxm-8"),
    load_cluster("b200-sxm-8"),
)
VLLM = backend("vllm")
TP1 = Layout(attn_tp=1, attn_dp=1, moe_tp=1, moe_ep=1)


def _weights(model, lay, align) -> float:  # type: ignore[no-untyped-def]
    shape = lay.memory_shape(model)
    held = mem.padded_experts(model, lay.moe_tp, align)
    return mem.stage_weights(held, shape, range(model.num_layers), True, True)


def test_marlin_padding_is_what_vllm_reports_loading():
    """vLLM 0.10.1 on the Marlin MXFP4 path logs "Model loading took 65.9651 GiB" for
    GPT-OSS-120B on one GPU (vllm-project/vllm issue #23278, 2025-08-20; the GPU was an H100
    without triton_kernels, so Marlin, as on every GPU below SM90). The experts padded from
    2,880 x 2,880 to 3,072 x 2,944 weigh that within 0.5 %; stored as is they would be 8 %
    short."""
    logged = 65.9651 * GIB
    padded = _weights(OSS120, TP1, VLLM.expert_alignment(OSS120.quant.experts.format, A100.gpu))
    plain = _weights(OSS120, TP1, (1, 1))
    assert abs(padded / logged - 1) < 0.005, padded / GIB
    assert plain / logged < 0.93


def test_vllm_pads_mxfp4_experts_per_backend_and_nothing_else():
    fmt = OSS120.quant.experts.format
    assert VLLM.expert_alignment(fmt, A100.gpu) == (128, 256)  # Marlin
    assert VLLM.expert_alignment(fmt, H100.gpu) == (64, 1)  # Triton
    assert VLLM.expert_alignment(fmt, B200.gpu) == (256, 256)  # FlashInfer TRT-LLM-gen
    assert VLLM.expert_alignment(BF16, A100.gpu) == (1, 1)
    assert backend("sglang").expert_alignment(fmt, A100.gpu) == (1, 1)
    # GPT-OSS at one rank on an A100: +9.0 % of the experts' bytes
    got = mem.padded_experts(OSS120, 1, (128, 256)).quant.experts.bytes_per_weight
    ratio = layer_math.mlp_params(3072, 2944, True, True) / layer_math.mlp_params(
        2880, 2880, True, True
    )
    assert got == pytest.approx(OSS120.quant.experts.bytes_per_weight * ratio, rel=1e-12)
    assert 1.089 < ratio < 1.091
    # already aligned: the model itself
    assert mem.padded_experts(OSS120, 1, (64, 1)) is OSS120


@settings(max_examples=examples(60), deadline=None)
@given(
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 32, 64, 128, 256]),
    st.sampled_from([1, 64, 128, 256]),
)
def test_padded_bytes_are_the_padded_experts_closed_form(tp, ai, ah):
    """One expert's bytes on a rank scale by the padded shape's parameters over the stored
    one's: ``ceil(ceil(I / tp) / ai) ai`` by ``ceil(H / ah) ah``."""
    i = math.ceil(OSS120.moe_intermediate_size / tp)
    ip, hp = math.ceil(i / ai) * ai, math.ceil(OSS120.hidden_size / ah) * ah
    want = layer_math.mlp_params(hp, ip, True, True) / layer_math.mlp_params(
        OSS120.hidden_size, i, True, True
    )
    got = mem.padded_experts(OSS120, tp, (ai, ah)).quant.experts.bytes_per_weight
    assert got / OSS120.quant.experts.bytes_per_weight == pytest.approx(want, rel=1e-12)


def test_the_vllm_pool_charges_the_sampler_run_and_its_non_torch_memory():
    """GPT-OSS-120B at one rank on an A100 (vLLM's defaults there: 256 sequences, 2,048
    tokens): ``0.9 G`` less the padded weights, the dummy sampler run (28 bytes x 256 x
    201,088) and 0.2 GiB; the pool's per-token rate counts only the 18 full-attention layers
    (2 KiB each), every sequence holding 9 blocks of 16 tokens on its 18 window layers."""
    pool = kv_pool("vllm", OSS120, A100, TP1, 2048)
    assert pool is not None
    assert pool.profile == 28 * 256 * 201_088 and pool.reserve == 0.2 * GIB
    assert pool.expert_align == (128, 256) and pool.window_block == 16
    cfg = engine_config("vllm", OSS120, A100, TP1)
    weights = _weights(OSS120, TP1, (128, 256))
    act, buf = mem.step_bytes(OSS120, TP1.memory_shape(OSS120), 2048)
    assert act + buf < pool.profile
    free = 0.9 * A100.gpu.mem_bytes - weights - pool.profile - 0.2 * GIB
    assert cfg.kv_tokens_per_rank == int(free // (18 * 2048))
    assert cfg.seq_kv == 9 * 16


def _held_blocks(window: int, block: int, length: int) -> int:
    """Brute force of vLLM's sliding-window blocks: the step that writes position ``n`` has
    computed ``n`` tokens, skips the first ``max(0, n - window + 1)`` and frees every block
    wholly among them (SlidingWindowManager.get_num_skipped_tokens / remove_skipped_blocks),
    so it holds the blocks from the skipped tokens' last one to position ``n``'s; the most
    over positions ``0..length``."""
    most = 0
    for n in range(length + 1):
        skipped = max(0, n - window + 1)
        most = max(most, n // block - skipped // block + 1)
    return most


@settings(max_examples=examples(80), deadline=None)
@given(st.integers(2, 600), st.sampled_from([1, 8, 16, 32, 64]))
def test_window_blocks_are_the_brute_force_most(window, block):
    """What :func:`moeplan.cost.memory.window_tokens_per_seq` charges a sequence is the most
    its window layers ever hold, in tokens of the full layers' rate (GPT-OSS: every layer 2
    KiB a token, 18 of each kind)."""
    model = dataclasses.replace(
        OSS20,
        layers=tuple(
            dataclasses.replace(x, mixer=dataclasses.replace(x.mixer, window=window))
            if x.mixer.kind == "swa"
            else x
            for x in OSS20.layer_specs
        ),
    )
    pool = mem.KVPool("total", 0.9, window_block=block)
    got = mem.window_tokens_per_seq(model, TP1.memory_shape(model), pool)
    assert got == _held_blocks(window, block, window + 3 * block) * block
    assert mem.window_tokens_per_seq(model, TP1.memory_shape(model), None) == 0


def _ends_empty(e: EngineState) -> None:
    assert e.kv_used == 0, e.kv_used
    assert not e.running


def _with_windows(run, w, cls) -> None:  # type: ignore[no-untyped-def]
    """``run`` with ``seq_kv = w`` tokens held per request (its pool grown by ``w``): the
    general loop never holds more than the pool and ends with it empty; ``cls`` runs it
    the same, bit for bit, and ends empty too, or declines where the loop preempts."""
    reqs, cfg, _, _ = run
    kv = max(cfg.kv_tokens + w, int(np.max(reqs.isl + reqs.osl)) + w)
    cfg = dataclasses.replace(cfg, seq_kv=w, kv_tokens=kv, kv_tokens_per_rank=kv)
    ref_engine = Engine(reqs, cfg, _priced)
    ref = ref_engine._run_open()
    _ends_empty(ref_engine)
    assert np.all(ref.iter_kv <= cfg.kv_tokens)
    if int(reqs.osl.max()) == 1:
        return
    fast = cls(reqs, cfg, _priced)
    try:
        got = fast.run()
    except NeedsPreemption:
        assert ref.preemptions > 0
        return
    _ends_empty(fast)
    assert np.array_equal(got.finish_s, ref.finish_s, equal_nan=True)
    assert np.array_equal(got.iter_kv, ref.iter_kv)


@settings(max_examples=examples(150), deadline=None)
@given(_streams(pool=False), st.sampled_from([1, 7, 144]))
def test_every_loop_frees_the_window_blocks_it_charged(run, w) -> None:  # type: ignore[no-untyped-def]
    """Fresh prompts, either policy: the general loop and the unpreempted engine."""
    _with_windows(run, w, UnpreemptedEngine)


@settings(max_examples=examples(100), deadline=None)
@given(_streams(pool=True), st.sampled_from([1, 7, 144]))
def test_the_decode_pool_engine_charges_the_window_blocks_too(run, w) -> None:  # type: ignore[no-untyped-def]
    """A P/D decode instance's pool: the general loop and the decode pool engine."""
    _with_windows(run, w, DecodePoolEngine)


def test_window_blocks_bound_the_running_requests():
    """Twenty identical requests at once in a pool of exactly four of them (context and
    window blocks): at most four run together, the same as a pool of four without window
    blocks whose contexts are that much longer; the prefill-only queue ends empty too."""
    from moeplan.serve.engine.config import EngineConfig
    from moeplan.serve.workload.arrivals import requests_from_rows

    n, isl, osl, w = 20, 100, 30, 144
    reqs = requests_from_rows(np.zeros(n), np.full(n, isl), np.full(n, osl))
    cfg = EngineConfig(policy="mixed", chunk_tokens=8192, max_running=64,
                       kv_tokens=4 * (isl + osl + w), seq_kv=w)  # fmt: skip
    e = Engine(reqs, cfg, _priced)
    res = e._run_open()
    _ends_empty(e)
    order = np.argsort(res.admit_s, kind="stable")
    running = [
        int(np.sum((res.admit_s <= res.admit_s[r]) & (res.finish_s > res.admit_s[r])))
        for r in order
    ]
    assert max(running) == 4
    one = requests_from_rows(np.zeros(n), np.full(n, isl), np.full(n, 1))
    p = EngineState(one, dataclasses.replace(cfg, policy="prefill-first"), _priced)
    run_prefill_only(p)
    assert p.kv_used == 0


def test_the_pool_against_vllms_own_available_kv_log():
    """The same log (issue #23278: vLLM 0.10.1, GPT-OSS-120B on one H100 on the Marlin path,
    default flags: 8,192 batched tokens, 1,024 sequences) reports "Available KV cache memory:
    -2.14 GiB". The pool's closed form on the 80 GiB record gives +0.59 GiB: 2.7 GiB
    optimistic (0.7 GiB of it the record's 80 GiB against the 79.2 GiB an H100 shows CUDA;
    the module docstring of moeplan.backends.vllm states the gap). Before the profile was
    modelled (4 GiB reserve, stored weights, no sampler run) the same figure was +6.8 GiB."""
    pool = dataclasses.replace(kv_pool("vllm", OSS120, H100, TP1, 8192), expert_align=(128, 256))
    shape = TP1.memory_shape(OSS120)
    weights = _weights(OSS120, TP1, (128, 256))
    act, buf = mem.step_bytes(OSS120, shape, 8192)
    got = pool.kv_bytes(H100.gpu.mem_bytes, weights, act + buf) / GIB
    assert pool.profile == 28 * 1024 * 201_088
    assert 0.5 < got < 0.7, got
    assert got - (-2.14) < 3.0
    old = 0.9 * H100.gpu.mem_bytes - _weights(OSS120, TP1, (1, 1)) - act - buf - 4 * GIB
    assert 6.5 < old / GIB < 7.0


def test_bench_states_the_pool_it_ran_with():
    """``moeplan bench``'s text names the instance's KV pool, its memory fraction, the window
    blocks each request holds and the running cap, as the engine configuration has them."""
    from moeplan.commands.bench import pool_line

    cfg = engine_config("vllm", OSS120, A100, TP1)
    sched = {"kv_tokens": cfg.kv_tokens, "max_running": cfg.max_running,
             "kv_window_tokens_per_request": cfg.seq_kv, "mem_fraction": cfg.mem_fraction}  # fmt: skip
    line = pool_line(sched)
    assert line == (
        f"KV pool: {cfg.kv_tokens:,} tokens per instance at memory fraction 0.9; each request "
        "also holds 144 tokens' worth of sliding-window blocks; running cap 256"
    )
    assert pool_line({"decode": {}}) is None
