"""DeepSeek-V3.2's sparse attention (DSA) in the serving paths, against independent answers.

Oracles: the FLOPs and bytes of the lightning indexer + sparse MLA counted by hand from
DeepSeek-V3.2's ``config.json``; NVIDIA's measured DSA module rows (SGLang 0.5.14, H100),
read straight from the shipped parquet; and the order the architecture implies — at 32K
keys a V3.2 decode step reads 2,048 selected latents plus fp8 index keys where V3 reads all
32K latents, so it is the faster one, while at 1K keys both attend every key and V3.2 pays
its indexer on top.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import numpy as np
import pyarrow.parquet as pq
import pytest

from moeplan.cost.kerneldb.sparse_features import SPARSE_FEATURES
from moeplan.kernel_tables import engine_cost_model, read_errors
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.serve.iteration.phase import PhaseModel
from moeplan.specs import load_cluster, load_model

V32 = "tests/data/configs/deepseek-ai--DeepSeek-V3.2/config.json"
TABLES = resources.files("moeplan").joinpath(
    "data", "measured", "kernels", "h100_sxm", "sparse_attention", "sglang", "0.5.14"
)
WIDE = Layout(attn_tp=1, attn_dp=8, moe_tp=1, moe_ep=8, pp=1)


@cache
def _cm(cluster: str):
    return engine_cost_model(load_cluster(cluster), None, "sglang")


def _row(phase: str, **where: object) -> float:
    t = pq.read_table(str(TABLES.joinpath(f"dsa_{phase}_module_perf.parquet"))).to_pandas()
    t = t[(t.architecture == "DeepseekV32ForCausalLM") & (t.op_name == f"dsa_{phase}_module")]
    for c, v in where.items():
        t = t[t[c] == v]
    assert len(t) >= 1, where
    return float(np.median(t["latency"])) * 1e-3


def test_indexer_and_sparse_mla_flops_and_bytes_are_the_hand_count() -> None:
    """One decode row (8 sequences, 32,768 cached keys, 128 heads, fp8 KV, block-fp8
    projections) and one prefill row (8,192 new tokens, no prefix), counted by hand from
    DeepSeek-V3.2 config.json: hidden 7168, q_lora 1536, kv_lora 512, rope 64, nope 128,
    v 128, index_n_heads 64, index_head_dim 128, index_topk 2048."""
    cols = {
        "architecture": np.array(["DeepseekV32ForCausalLM"] * 2),
        "kernel_source": np.array(["sglang_dsa_indexer_flashmla_kv"] * 2),
        "kv_cache_dtype": np.array(["fp8"] * 2),
        "gemm_type": np.array(["fp8_block"] * 2),
        "batch_size": np.array([8.0, 1.0]),
        "isl": np.array([1.0, 8192.0]),
        "step": np.array([32767.0, 0.0]),
        "num_heads": np.array([128.0, 128.0]),
    }
    f = SPARSE_FEATURES["dsa"](cols)
    weights = (7168 * (1536 + 512 + 64) + 7168 * 128 + 7168 * 64 + 1536 * 64 * 128
               + 128 * (1536 * 192 + 512 * 256 + 128 * 7168))  # fmt: skip
    # decode: each of 8 queries scores all 32,768 keys (indexer) and attends 2,048 latents
    index = 2 * 8 * 64 * 128 * 32768
    core = 2 * 8 * 128 * 2048 * (576 + 512)
    assert f.flops[0] == pytest.approx(index + core + 2 * 8 * weights, rel=1e-12)
    cache_bytes = 8 * 32768 * 128 + 8 * 2048 * 576  # fp8 index keys + gathered fp8 latents
    assert f.nbytes[0] == pytest.approx(cache_bytes + weights + 2 * 2 * 8 * 7168, rel=1e-12)
    # prefill: query i sees i keys; the first 2,048 attend all of theirs, the rest 2,048;
    # the indexer scores every key a query sees (mean (8192 + 1) / 2); prefill pads heads
    # to FlashMLA's 64-head tiles (128 heads: no padding)
    sel = (2048 * 2049 / 2 + (8192 - 2048) * 2048) / 8192
    index = 2 * 8192 * 64 * 128 * (8192 + 1) / 2
    core = 2 * 8192 * 128 * sel * (576 + 512)
    assert f.flops[1] == pytest.approx(index + core + 2 * 8192 * weights, rel=1e-12)
    # at 32K keys the attended work is 2,048 / 32,768 of dense MLA's: the indexer dominates
    dense_core = 2 * 8 * 128 * 32768 * (576 + 512)
    assert f.flops[0] - 2 * 8 * weights < 0.2 * dense_core


def test_short_prefill_is_the_dense_mha_row_sglang_runs() -> None:
    """SGLang runs DSA prefill as dense MHA when the sequence holds <= index_topk keys
    (nsa_backend.py set_nsa_prefill_impl): 2,048 new tokens, no prefix, 128 heads (attention
    DP) cost the measured ``sglang_dsa_dense_mha_fa3`` row, not the sparse kernel's
    extrapolation (3.2 ms against the row's 1.07 ms). Within the table's held-out p90: the
    database lifts a row that runs below its features' datasheet roofline to that roofline
    (the bf16 row: +4 %)."""
    cm, md = _cm("h100-sxm-8"), load_model(V32)
    p90 = read_errors()[("h100_sxm", "sglang", "context_dsa_module", "interpolated")][1]
    for kv, dtype in (("bf16", "bfloat16"), ("fp8", "fp8")):
        want = _row("context", kernel_source="sglang_dsa_dense_mha_fa3", kv_cache_dtype=dtype,
                    gemm_type="fp8_block", num_heads=128, batch_size=1, isl=2048, step=0)  # fmt: skip
        got = cm.wide_mla(md, 1, 2048, 2048, kv)
        assert got is not None and abs(got / want - 1) <= p90, (kv, got, want)
    # beyond index_topk keys the sparse kernel's row
    want = _row("context", kernel_source="sglang_dsa_indexer_flashmla_kv", kv_cache_dtype="fp8",
                gemm_type="fp8_block", num_heads=128, batch_size=1, isl=8192, step=0)  # fmt: skip
    assert cm.wide_mla(md, 1, 8192, 8192, "fp8") == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize(("batch", "ctx"), [(256, 1000), (8, 30000), (64, 3000)])
def test_wide_ep_decode_is_the_measured_module_within_its_heldout_error(batch, ctx) -> None:
    """The wide-EP attention of a V3.2 decode step (attention DP: 128 heads, fp8 KV) at keys
    between measured steps is within the table's held-out p90 of the next measured row plus
    8 %: the measured module grows by under 8 % from these keys to that step (1,024 /
    32,768 / 4,096), where the dense wide-EP MLA tables price 0.58x / (no row) / 0.91x."""
    cm, md = _cm("h100-sxm-8"), load_model(V32)
    p90 = read_errors()[("h100_sxm", "sglang", "generation_dsa_module", "interpolated")][1]
    steps = {1000: 1024, 30000: 32768, 3000: 4096}
    want = _row("generation", kernel_source="sglang_dsa_indexer_flashmla_kv",
                kv_cache_dtype="fp8", gemm_type="fp8_block", num_heads=128, batch_size=batch,
                step=steps[ctx])  # fmt: skip
    got = cm.wide_mla(md, batch, 1, ctx, "fp8")
    assert got is not None and abs(got / want - 1) <= p90 + 0.08, (got, want)


def _step(model: str, seqs_per_gpu: int, ctx: int) -> float:
    c = load_cluster("h200-sxm-8")
    it = IterationModel(load_model(model), c, _cm("h200-sxm-8"), WIDE,
                        knobs=InstanceKnobs(a2a="deepep", kv_dtype="fp8"))  # fmt: skip
    return it(Batch(decode=8 * seqs_per_gpu, decode_ctx=ctx))


#: the measured ratio behind the 1K bound: SGLang's DSA decode module over its wide-EP MLA
#: module, 128 heads, fp8 KV, 256 sequences at 1,024 keys on H100 (0.566 / 0.33 ms: the
#: indexer's projections, logits and top-k on top of a dense-sized MLA); the attention is
#: under half of a wide-EP decode step, so the step grows by less than 1.4x
SHORT_STEP_FACTOR = 1.4


def test_v32_decode_is_faster_than_v3_at_32k_and_within_a_factor_at_1k() -> None:
    """Serving iteration, H200 x 8, attention DP 8 + DeepEP EP 8, fp8 KV: DeepSeek-V3.2's
    decode step at 32K keys is below DeepSeek-V3's at the same layout and batch; at 1K keys
    (every key selected) it is above V3's and below :data:`SHORT_STEP_FACTOR` times it."""
    for seqs in (8, 32):
        assert _step(V32, seqs, 32768) < _step("deepseek-v3", seqs, 32768)
    v32, v3 = _step(V32, 256, 1024), _step("deepseek-v3", 256, 1024)
    assert v3 < v32 < SHORT_STEP_FACTOR * v3


def test_phase_model_prices_dsa_sparse_on_the_wide_ep_path() -> None:
    """``serve-sim --phase decode`` on the wide-EP path prices V3.2's attention from the DSA
    module tables (never the dense wide-EP MLA tables), so at 32K keys its step is below
    V3's."""
    c = load_cluster("h200-sxm-8")
    kn = InstanceKnobs(a2a="deepep", kv_dtype="fp8")
    cm = engine_cost_model(c, None, "sglang")  # fresh provenance
    v32 = PhaseModel(load_model(V32), c, cm, WIDE, kn).step("decode", 16, 32768).step_s
    ops = set(cm.provenance())
    assert "generation_dsa_module" in ops and "wideep_generation_mla" not in ops, ops
    v3 = PhaseModel(load_model("deepseek-v3"), c, _cm("h200-sxm-8"), WIDE, kn)
    assert v32 < v3.step("decode", 16, 32768).step_s
