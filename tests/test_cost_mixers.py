"""Pricing a decoder layer by its mixer kind (moeplan.cost.mixers) against NVIDIA's tables.

Oracles: the measured rows themselves, read here straight from the shipped parquet files (a
layer whose shape was measured must cost exactly its rows, plus projections computed by hand
for the recurrent kinds), and what the layer kinds are: a recurrent layer's state does not
grow with the context, a DSA layer's core attends ``index_topk`` keys whatever the context.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from importlib import resources

import numpy as np
import pyarrow.parquet as pq
import pytest

from moeplan.kernel_tables import engine_cost_model
from moeplan.serve.iteration.model import IterationModel
from moeplan.specs import ModelSpec, load_cluster, load_model
from moeplan.specs.layers import Mixer

KERNELS = resources.files("moeplan").joinpath("data", "measured", "kernels", "h100_sxm")


def _rows(path: str, **where: object) -> np.ndarray:
    t = pq.read_table(str(KERNELS.joinpath(path))).to_pandas()
    for c, v in where.items():
        t = t[t[c] == v]
    return t["latency"].to_numpy() * 1e-3  # ms -> s


def _with_mixers(base: ModelSpec, mixers: list[Mixer]) -> ModelSpec:
    """``base`` with its layers' mixers replaced, cycling through ``mixers``."""
    layers = tuple(
        replace(x, mixer=mixers[i % len(mixers)]) for i, x in enumerate(base.layer_specs)
    )
    return replace(base, layers=layers, _layers=(), _moe_flags=())


# Qwen3.5-35B-A3B config.json: linear_num_key_heads 16, linear_num_value_heads 32, key/value
# head dims 128, linear_conv_kernel_dim 4; three Gated DeltaNet layers to one full attention
GDN = Mixer(kind="gdn", lin_key_heads=16, lin_value_heads=32, lin_key_dim=128,
            lin_value_dim=128, conv_kernel=4)  # fmt: skip
# DeepSeek-V3.2 config.json (MLA dims of DeepSeek-V3; index_n_heads 64, index_head_dim 128,
# index_topk 2048)
DSA = Mixer(kind="dsa", num_heads=128, num_kv_heads=128, v_head_dim=128, q_lora_rank=1536,
            kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, index_topk=2048,
            index_n_heads=64, index_head_dim=128)  # fmt: skip


@cache
def _cm(engine: str = "sglang"):
    return engine_cost_model(load_cluster("h100-sxm-8"), None, engine)


@cache
def _qwen35() -> ModelSpec:
    base = load_model("qwen3-30b-a3b")  # 2048 hidden, as Qwen3.5-35B-A3B
    return _with_mixers(base, [GDN, GDN, GDN, base.layer_specs[0].mixer])


@cache
def _dsv32() -> ModelSpec:
    return _with_mixers(load_model("deepseek-v3"), [DSA])


def test_gdn_prefill_is_its_two_measured_kernels_plus_projections() -> None:
    """Qwen3.5-35B-A3B's GDN layer, 4 sequences of 4096 tokens on one GPU (SGLang): the
    measured conv and chunked delta-rule rows of that very shape + in/out projections."""
    cm, md = _cm(), _qwen35()
    shape = dict(phase="context", num_k_heads=16, num_v_heads=32, batch_size=4, seq_len=4096,
                 model_name="Qwen/Qwen3.5-35B-A3B")  # fmt: skip
    conv = _rows(
        "linear_attention/sglang/0.5.14/gdn_perf.parquet", kernel_source="causal_conv1d_fn", **shape
    )
    rule = _rows(
        "linear_attention/sglang/0.5.14/gdn_perf.parquet",
        kernel_source="chunk_gated_delta_rule",
        **shape,
    )
    t = 4 * 4096
    # in_proj: q, k (16 x 128 each), v and z (32 x 128 each), a and b (32 each); out_proj back
    proj = cm.gemm(t, 2 * 16 * 128 + 2 * 32 * 128 + 2 * 32, 2048) + cm.gemm(t, 2048, 32 * 128)
    got = cm.mixer_layer(md, 0, 4, 4096, 4096, 1)
    assert got == pytest.approx(conv[0] + rule[0] + proj, rel=1e-9)


def test_recurrent_layers_do_not_grow_with_the_context() -> None:
    cm, md = _cm(), _qwen35()
    assert cm.mixer_layer(md, 0, 64, 1, 1_000, 1) == cm.mixer_layer(md, 0, 64, 1, 500_000, 1)
    assert cm.mixer_layer(md, 0, 1, 512, 512, 1) == cm.mixer_layer(md, 0, 1, 512, 200_000, 1)
    assert cm.mixer_layer(md, 3, 64, 1, 1_000, 1) is None  # the full-attention layer


def test_a_hybrid_model_layer_mean_weights_its_kinds() -> None:
    """Without a layer index, attention_layer is the mean over layers (3 GDN : 1 attention)."""
    cm, md = _cm(), _qwen35()
    gdn = cm.attention_layer(md, 8, 1, 4096, 1, 0)
    full = cm.attention_layer(md, 8, 1, 4096, 1, 3)
    assert cm.attention_layer(md, 8, 1, 4096, 1) == pytest.approx(0.75 * gdn + 0.25 * full)


def test_dsa_layer_is_its_measured_module_row() -> None:
    """DeepSeek-V3.2 at TP 8 (16 heads per GPU), one sequence decoding at 131,073 keys, fp8
    KV cache and block-fp8 projections: the module table's own row (SGLang)."""
    cm = _cm()
    md = replace(_dsv32(), layers=tuple(replace(x, mixer=replace(DSA, kv_bytes=1)) for x in _dsv32().layer_specs), _layers=(), _moe_flags=())  # fmt: skip
    md = replace(md, quant=replace(md.quant, attention=replace(md.quant.attention,
                 format=replace(md.quant.attention.format, kernel_dtype="fp8_block"))))  # fmt: skip
    want = _rows(
        "sparse_attention/sglang/0.5.14/dsa_generation_module_perf.parquet",
        architecture="DeepseekV32ForCausalLM", op_name="dsa_generation_module",
        kernel_source="sglang_dsa_indexer_flashmla_kv", num_heads=16, batch_size=1,
        step=131072,
    )  # fmt: skip
    assert len(want) >= 1
    assert cm.mixer_layer(md, 0, 1, 1, 131073, 8) == pytest.approx(
        float(np.median(want))
    )  # step = keys - 1


def test_dsa_layers_are_priced_from_the_dsa_tables_not_dense_mla() -> None:
    """Every DSA layer of a DeepSeek-V3.2-shaped model asks the DSA module table (indexer over
    every key + top-k attention), never the dense MLA tables, at short and long context."""
    cm = engine_cost_model(load_cluster("h100-sxm-8"), None, "sglang")  # fresh provenance
    md = _dsv32()
    for ctx in (4096, 65537, 131073):
        cm.attention_layer(md, 2, 1, ctx, 8)
        cm.attention_layer(md, 1, 2048, ctx, 8)
    prov = cm.provenance()
    assert set(prov) == {"generation_dsa_module", "context_dsa_module"}, prov


def test_mamba2_scan_is_a_stated_roofline() -> None:
    cm = _cm("trtllm")
    m = Mixer(kind="mamba2", num_heads=64, head_dim=64, ssm_state=128, ssm_groups=8, conv_kernel=4)
    md = _with_mixers(load_model("qwen3-30b-a3b"), [m])
    assert cm.mixer_layer(md, 0, 8, 1, 4096, 1) > 0
    prov = cm.provenance()
    assert "roofline" in prov["mamba2_scan"] and "generation_mamba2_conv" in prov


def test_serve_iteration_prices_each_mixer_kind() -> None:
    """The iteration model of a hybrid model calls the per-kind price for its GDN layers."""
    from moeplan.serve.iteration.model import Batch
    from moeplan.serve.layout import ServeLayout

    cm = engine_cost_model(load_cluster("h100-sxm-8"), None, "sglang")  # fresh provenance
    md = _qwen35()
    layout = ServeLayout(attn_tp=1, attn_dp=8, moe_tp=1, moe_ep=8, pp=1)
    it = IterationModel(md, load_cluster("h100-sxm-8"), cm, layout)
    it(Batch(decode=8, decode_ctx=4096, prefill=((512, 512),)))
    prov = cm.provenance()
    assert "generation_gdn" in prov and "context_gdn" in prov


def test_layers_without_a_mixer_cost_nothing_and_the_mean_is_the_layers_sum() -> None:
    """Nemotron-3-Nano (Mamba-2, attention and MoE-only blocks): a block without a mixer
    costs 0, and the per-layer mean is the brute-force sum over its layers / layers."""
    cm, m = _cm("trtllm"), load_model("nemotron-3-nano-30b-a3b")
    none = [i for i, x in enumerate(m.layer_specs) if x.mixer.kind == "none"]
    assert none and all(cm.attention_layer(m, 8, 1, 4096, 1, i) == 0.0 for i in none)
    brute = sum(cm.attention_layer(m, 8, 1, 4096, 1, i) for i in range(m.num_layers))
    assert cm.attention_layer(m, 8, 1, 4096, 1) == pytest.approx(brute / m.num_layers)


@pytest.mark.parametrize(
    ("preset", "ops"),
    [
        ("glm-5-fp8", {"generation_dsa_module"}),
        ("deepseek-v4-flash", {"generation_csa_module", "generation_hca_module"}),
        ("minimax-m3", {"generation_msa_module", "generation_attention"}),
    ],
)
def test_presets_of_the_new_kinds_are_priced_by_their_tables(preset: str, ops: set) -> None:
    cm = engine_cost_model(load_cluster("h100-sxm-8"), None, "sglang")  # fresh provenance
    m = load_model(preset)
    assert cm.attention_layer(m, 16, 1, 65536, 8) > 0
    assert ops <= set(cm.provenance())
