"""ModelSpec: published sizes, derived quantities, and the config parser's error handling."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.errors import MoeplanError
from moeplan.specs import load_model, model_from_dict, model_names
from moeplan.specs.hf_config import native_to_hf
from moeplan.specs.presets import model_config

# (total, activated) in billions, as published by each model's authors.
PUBLISHED = {
    "deepseek-v3": (671, 37),
    "kimi-k2": (1040, 32),
    "deepseek-v2": (236, 21),
    "deepseek-v2-lite": (15.7, 2.4),
    "qwen3-235b-a22b": (235, 22),
    "qwen3-30b-a3b": (30.5, 3.3),
    "qwen2-57b-a14b": (57, 14),
    "mixtral-8x7b": (46.7, 12.9),
    "gpt-oss-120b": (117, 5.1),
    # Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 card: 235B total, 22B activated
    "qwen3-235b-a22b-2507-fp8": (235, 22),
    # zai-org/GLM-4.5 card: GLM-4.5-Air 106B total, 12B active (MTP layer not counted)
    "glm-4.5-air-fp8": (106, 12),
    # zai-org/GLM-4.6 card: GLM-4.5's 355B-A32B network
    "glm-4.6": (355, 32),
}
#: presets whose config is a sample under tests/data/configs/ (sizes checked there, against
#: published.json with each figure's rounding): preset -> sample folder
SAMPLES = {
    "deepseek-v4-flash": "deepseek-ai--DeepSeek-V4-Flash",
    "qwen3.5-35b-a3b": "Qwen--Qwen3.5-35B-A3B",
    "kimi-k2.5": "moonshotai--Kimi-K2.5",
    "glm-5-fp8": "zai-org--GLM-5-FP8",
    "llama-4-scout": "meta-llama--Llama-4-Scout-17B-16E-Instruct",
    "gemma-4-26b-a4b": "google--gemma-4-26B-A4B",
    "nemotron-3-nano-30b-a3b": "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "minimax-m3": "MiniMaxAI--MiniMax-M3",
    "gpt-oss-20b": "openai--gpt-oss-20b",
    "glm-4.5": "zai-org--GLM-4.5",
    "glm-4.5-air": "zai-org--GLM-4.5-Air",
    "glm-4.6-fp8": "zai-org--GLM-4.6-FP8",
    "glm-4.7": "zai-org--GLM-4.7",
}


def _close(ours: float, published: float) -> bool:
    """Within 2 %, or inside the rounding interval of a 2-significant-digit figure (+0.1 %).

    DeepSeek-V2-Lite's "2.4B activated" is the one case that needs the second clause: the
    exact count is 2.4514B, 0.06 % above the interval [2.35, 2.45) that "2.4" stands for.
    """
    if abs(ours / published - 1) <= 0.02:
        return True
    half_digit = 0.5 * 10 ** (math.floor(math.log10(published)) - 1)
    return abs(ours - published) <= half_digit * 1.001 + published * 1e-3


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_params_match_published_sizes(name):
    m = load_model(name)
    total, active = PUBLISHED[name]
    assert _close(m.params_total / 1e9, total), m.params_total
    assert _close(m.params_active / 1e9, active), m.params_active


def test_every_preset_is_listed():
    assert sorted(model_names()) == sorted([*PUBLISHED, *SAMPLES])


@pytest.mark.parametrize("name", list(SAMPLES))
def test_sample_presets_are_the_walked_samples(name):
    """The preset's shipped config is the sample the config walker checks (same JSON)."""
    path = Path(__file__).parent / "data" / "configs" / SAMPLES[name] / "config.json"
    assert model_config(name) == json.loads(path.read_text())


def test_mla_kv_cache_stores_latent():
    m = load_model("deepseek-v3")
    assert m.kv_bytes_per_token_layer() == (512 + 64) * 2
    assert m.kv_bytes_per_token == 61 * (512 + 64) * 2


def test_gqa_kv_cache():
    m = load_model("qwen3-235b-a22b")
    assert m.kv_bytes_per_token == 94 * 2 * 4 * 128 * 2


def test_sliding_layers_cap_kv_and_attention():
    m = load_model("gpt-oss-120b")
    assert len(m.sliding_layers) == 18 and m.sliding_window == 128
    per = m.kv_bytes_per_token_layer()
    assert m.kv_bytes_for_context(10_000) == 18 * 10_000 * per + 18 * 128 * per
    assert m.attn_core_flops(10_000, layer=m.sliding_layers[0]) == m.attn_core_flops(128)


def test_dense_prefix_and_moe_layers():
    m = load_model("deepseek-v3")
    assert m.num_dense_layers == 3 and m.moe_layers[0] == 3 and m.num_moe_layers == 58


def test_native_and_hf_deepseek_v3_agree():
    native = model_from_dict(model_config("deepseek-v3") | {}, "hf")
    raw = json.loads(
        json.dumps(
            native_to_hf(
                {
                    "vocab_size": 129280,
                    "dim": 7168,
                    "inter_dim": 18432,
                    "moe_inter_dim": 2048,
                    "n_layers": 61,
                    "n_dense_layers": 3,
                    "n_heads": 128,
                    "n_routed_experts": 256,
                    "n_shared_experts": 1,
                    "n_activated_experts": 8,
                    "n_expert_groups": 8,
                    "n_limited_groups": 4,
                    "route_scale": 2.5,
                    "score_func": "sigmoid",
                    "q_lora_rank": 1536,
                    "kv_lora_rank": 512,
                    "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64,
                    "v_head_dim": 128,
                    "dtype": "fp8",
                }
            )
        )
    )
    from_native = model_from_dict(raw, "native")
    assert from_native.params_total == native.params_total
    assert from_native.kv_bytes_per_token == native.kv_bytes_per_token


def test_flops_per_token_is_twice_active_params_plus_attention():
    m = load_model("mixtral-8x7b")
    f = m.flops_per_token(1, "decode")
    linear = 2 * (
        m.params_active - m.embedding_params - m.hidden_size - m.num_layers * 2 * m.hidden_size
    )
    assert f == pytest.approx(linear + m.num_layers * m.attn_core_flops(1), rel=1e-6)


def test_with_layers_keeps_shape():
    m = load_model("deepseek-v2").with_layers(4)
    assert m.num_layers == 4 and m.num_moe_layers == 3 and m.first_k_dense == 1


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("num_hidden_layers", 0, "num_layers"),
        ("hidden_size", -5, "hidden_size"),
        ("num_experts_per_tok", 400, "top_k"),
        ("n_group", 7, "n_group"),
        ("num_key_value_heads", 3, "num_kv_heads"),
    ],
)
def test_bad_values_name_field_value_rule(field, value, needle):
    cfg = dict(model_config("deepseek-v3"))
    cfg[field] = value
    if field == "num_key_value_heads":
        cfg = dict(model_config("qwen3-30b-a3b"), num_key_value_heads=3)
    with pytest.raises(MoeplanError) as err:
        model_from_dict(cfg, "x")
    msg = str(err.value)
    assert needle in msg and str(value) in msg and "\n" not in msg


def test_missing_key_is_named():
    cfg = dict(model_config("mixtral-8x7b"))
    del cfg["num_local_experts"]
    with pytest.raises(MoeplanError, match="num_local_experts"):
        model_from_dict(cfg, "x")


def test_unknown_preset():
    with pytest.raises(MoeplanError, match="not a preset"):
        load_model("llama-moe-9000")


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-10, 10**6)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=5,
)


@settings(max_examples=examples(150))
@given(
    base=st.sampled_from(list(PUBLISHED)),
    mutations=st.dictionaries(
        st.sampled_from(
            [
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "num_experts",
                "n_routed_experts",
                "num_local_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
                "intermediate_size",
                "kv_lora_rank",
                "q_lora_rank",
                "first_k_dense_replace",
                "n_group",
                "topk_group",
                "layer_types",
                "head_dim",
                "mlp_only_layers",
                "decoder_sparse_step",
                "vocab_size",
                "quantization_config",
                "moe_layer_freq",
                "sliding_window",
                "shared_expert_intermediate_size",
            ]
        ),
        _json,
        max_size=4,
    ),
    drop=st.lists(
        st.sampled_from(
            ["hidden_size", "num_hidden_layers", "vocab_size", "num_experts_per_tok", "model_type"]
        ),
        max_size=2,
    ),
)
def test_mutated_configs_raise_only_validation_errors(base, mutations, drop):
    cfg = dict(model_config(base))
    cfg.update(mutations)
    for k in drop:
        cfg.pop(k, None)
    try:
        m = model_from_dict(cfg, "fuzz")
    except MoeplanError as err:
        assert "\n" not in str(err)
        return
    assert m.params_total > 0 and m.params_active <= m.params_total


@settings(max_examples=examples(50))
@given(_json)
def test_random_json_raises_only_validation_errors(obj):
    with pytest.raises(MoeplanError):
        model_from_dict(obj, "fuzz")
