"""Weight quantization from ``quantization_config``: bytes per weight in
closed form for every method, which modules each config covers, memory and decode-GEMM time.

Test configs (``tests/data/quant_*.json``) are the shipped Qwen3-30B-A3B / Mixtral-8x7B
``config.json`` files with the ``quantization_config`` of a real checkpoint of each method.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.cost import memory as mem
from moeplan.cost.kerneldb.pricing import moe_shape
from moeplan.cost.model import CostModel
from moeplan.errors import MoeplanError
from moeplan.specs import ModelSpec, load_cluster, load_model, model_from_dict
from moeplan.specs.presets import model_config
from moeplan.specs.quant import UNQUANTIZED, ct_match, hf_excluded
from moeplan.specs.quant_parse import READERS

DATA = Path(__file__).parent / "data"
INT4_G128_ZERO = 4 / 8 + (2 + 4 / 8) / 128  # packed int4, fp16 scale + packed int4 zero / 128
INT4_G128_SYM = 4 / 8 + 2 / 128  # compressed-tensors symmetric: bf16 scale only


def _data(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"quant_{name}.json").read_text())


def _with(base: str, q: dict[str, Any]) -> ModelSpec:
    return model_from_dict({**model_config(base), "quantization_config": q}, name=base)


def _ct(weights: dict[str, Any], acts: dict[str, Any] | None = None, **top: Any) -> dict:
    group = {"targets": ["Linear"], "weights": weights, "input_activations": acts}
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": group},
            "ignore": ["lm_head"], **top}  # fmt: skip


# (test data file or (base preset, quantization_config), experts B/weight, attention B/weight,
#  compute dtype of the experts, experts' kernel dtype) — each figure by hand from the format
CASES = [
    ("qwen3_30b_a3b_awq", INT4_G128_ZERO, INT4_G128_ZERO, "bf16", "int4_wo"),
    ("mixtral_8x7b_gptq", INT4_G128_ZERO, INT4_G128_ZERO, "bf16", "int4_wo"),
    ("qwen3_30b_a3b_w4a16", INT4_G128_SYM, INT4_G128_SYM, "bf16", "int4_wo"),
    ("qwen3_30b_a3b_w8a8", 1.0, 1.0, "int8", "int8"),
    ("mixtral_8x7b_experts_fp8", 1.0, 2.0, "fp8", "fp8"),
    (("deepseek-v3", None), 1 + 4 / (128 * 128), 1 + 4 / (128 * 128), "fp8", "fp8_block"),
    (("gpt-oss-120b", None), 4.25 / 8, 2.0, "bf16", "w4a16_mxfp4"),
    (("qwen3-30b-a3b", {"quant_method": "gptq", "bits": 3, "group_size": 64}),
     3 / 8 + (2 + 3 / 8) / 64, 3 / 8 + (2 + 3 / 8) / 64, "bf16", "int4_wo"),
    (("qwen3-30b-a3b", {"quant_method": "gptq", "bits": 8, "group_size": -1}),
     1.0, 1.0, "bf16", "int8_wo"),
    (("qwen3-30b-a3b", {"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "zero_point": False}),
     0.5 + 2 / 64, 0.5 + 2 / 64, "bf16", "int4_wo"),
    (("mixtral-8x7b", {"quant_method": "bitsandbytes", "load_in_4bit": True,
                       "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True}),
     0.5 + (1 + 4 / 256) / 64, 0.5 + (1 + 4 / 256) / 64, "bf16", "int4_wo"),
    (("mixtral-8x7b", {"quant_method": "bitsandbytes", "load_in_4bit": True}),
     0.5 + 4 / 64, 0.5 + 4 / 64, "bf16", "int4_wo"),
    (("mixtral-8x7b", {"quant_method": "bitsandbytes", "load_in_8bit": True}),
     1.0, 1.0, "bf16", "int8_wo"),
    (("qwen3-30b-a3b", _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                            "symmetric": False})),
     INT4_G128_ZERO, INT4_G128_ZERO, "bf16", "int4_wo"),
    (("qwen3-30b-a3b", _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
                           format="naive-quantized")),
     1 + 2 / 128, 1 + 2 / 128, "bf16", "int4_wo"),  # one int8 container per weight
    (("qwen3-30b-a3b", _ct({"num_bits": 8, "type": "float", "strategy": "block",
                            "block_structure": [128, 128]}, {"num_bits": 8, "type": "float"},
                           format="float-quantized")),
     1 + 2 / (128 * 128), 1 + 2 / (128 * 128), "fp8", "fp8_block"),
    (("qwen3-30b-a3b", _ct({"num_bits": 4, "type": "float", "strategy": "tensor_group",
                            "group_size": 16}, {"num_bits": 4, "type": "float"},
                           format="nvfp4-pack-quantized")),
     0.5 + 1 / 16, 0.5 + 1 / 16, "fp8", "nvfp4"),
    (("mixtral-8x7b", {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                       "ignore": ["lm_head", "model.layers.*.block_sparse_moe.gate",
                                  "model.layers.*.self_attn*"]}),
     0.5 + 1 / 16, 2.0, "fp8", "nvfp4"),  # NVIDIA NVFP4 MoE checkpoint: attention kept bf16
    (("qwen3-30b-a3b", {"quant_method": "modelopt", "quant_algo": "W4A16_NVFP4",
                        "exclude_modules": ["lm_head"]}),
     0.5 + 1 / 16, 0.5 + 1 / 16, "bf16", "int4_wo"),
    (("qwen3-30b-a3b", {"quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["lm_head"]}),
     1.0, 1.0, "fp8", "fp8"),
]  # fmt: skip


def _model(case: Any) -> ModelSpec:
    if isinstance(case, str):
        return model_from_dict(_data(case), name=case)
    base, q = case
    return load_model(base) if q is None else _with(base, q)


@pytest.mark.parametrize("case,experts,attention,compute,kernel", CASES)
def test_bytes_per_weight_closed_form(case, experts, attention, compute, kernel):
    """Each method's bytes per weight (scales and zero points included) match the closed form;
    router and embedding stay bf16; the lm-head only when the config quantizes it."""
    m = _model(case)
    assert m.expert_weight_bytes == pytest.approx(experts, rel=1e-12)
    assert m.weight_bytes == pytest.approx(attention, rel=1e-12)
    assert m.quant.experts.format.compute == compute
    assert m.quant.experts.format.kernel_dtype == kernel
    assert m.quant.router.bytes_per_weight == m.quant.embedding.bytes_per_weight == 2.0
    assert m.quant.lm_head.bytes_per_weight == 2.0
    local = m.num_experts // 2
    assert moe_shape(m, 4.0, local, 1)["moe_dtype"] == kernel


def test_weight_total_is_the_sum_of_the_classes():
    """AWQ Qwen3-30B-A3B: int4 attention and experts, everything else bf16, in closed form;
    the memory blocks of one GPU (tp = 1) add up to the same total."""
    m = model_from_dict(_data("qwen3_30b_a3b_awq"), "awq")
    nm, q = m.num_moe_layers, INT4_G128_ZERO
    expected = (m.num_layers * m.attn_params + nm * m.num_experts * m.expert_params) * q + (
        nm * m.router_params + m.embedding_params + m.lm_head_params + m.hidden_size
    ) * 2
    assert m.weight_bytes_total() == pytest.approx(expected, rel=1e-12)
    blocks = (
        m.num_layers * mem.attn_weight_bytes(m)
        + nm * mem.expert_weight_bytes(m, m.num_experts)
        + nm * mem.shared_weight_bytes(m)
        + m.num_dense_layers * mem.dense_mlp_weight_bytes(m)
        + mem.embedding_bytes(m)
        + m.hidden_size * 2
    )
    assert blocks == pytest.approx(m.weight_bytes_total(), rel=1e-12)
    assert mem.floor_breakdown(m, 4).weights == pytest.approx(expected / 4, rel=1e-12)


def test_gpt_oss_checkpoint_size_matches_published():
    """gpt-oss-120b: OpenAI's model card gives a 60.8 GiB checkpoint (MXFP4 experts, bf16
    rest); ours within 1 %."""
    assert load_model("gpt-oss-120b").weight_bytes_total() / 2**30 == pytest.approx(60.8, rel=0.01)


def test_native_deepseek_fp8_is_the_hf_fp8_block_config():
    """DeepSeek's native ``dtype: fp8`` reads as fp8 in 128x128 blocks, like the HF config."""
    native = load_model("deepseek-v3")  # HF config
    raw = json.loads(
        (Path(__file__).parents[1] / "src/moeplan/specs/presets/configs/"
         "DeepSeek-V3.deepseek_native.json").read_text()
    )  # fmt: skip
    assert model_from_dict(raw, "native").quant.experts == native.quant.experts


def test_layer_specific_exclusion_is_weighted_over_layers():
    """``modules_to_not_convert: [model.layers.0]`` keeps layer 0 in bf16 (not layer 10..19):
    attention and experts are (2 + 47 q) / 48 of the 48 equal layers."""
    cfg = _data("qwen3_30b_a3b_awq")
    cfg["quantization_config"] = {**cfg["quantization_config"],
                                  "modules_to_not_convert": ["model.layers.0"]}  # fmt: skip
    m = model_from_dict(cfg, "awq")
    want = (2 + 47 * INT4_G128_ZERO) / 48
    assert m.weight_bytes == pytest.approx(want, rel=1e-12)
    assert m.expert_weight_bytes == pytest.approx(want, rel=1e-12)


def test_attention_left_out_keeps_bf16_attention():
    """AWQ with ``self_attn`` not converted: attention bf16, experts int4."""
    cfg = _data("qwen3_30b_a3b_awq")
    cfg["quantization_config"] = {**cfg["quantization_config"],
                                  "modules_to_not_convert": ["self_attn"]}  # fmt: skip
    m = model_from_dict(cfg, "awq")
    assert (m.weight_bytes, m.expert_weight_bytes) == (2.0, pytest.approx(INT4_G128_ZERO))
    assert m.quant.experts.format.name == "int4" and m.quant.attention.format.name == "bf16"


def test_ct_regex_is_matched_from_the_start_of_the_name():
    """compressed-tensors matches ``re:`` with ``re.match``: ``re:.*gate`` also catches every
    expert's ``gate_proj`` (one of three equal projections stays bf16), ``re:.*mlp.gate$``
    only the router."""
    q = _data("qwen3_30b_a3b_w4a16")["quantization_config"]
    loose = _with("qwen3-30b-a3b", {**q, "ignore": ["lm_head", "re:.*gate"]})
    assert loose.expert_weight_bytes == pytest.approx((2 + 2 * INT4_G128_SYM) / 3, rel=1e-12)
    assert loose.quant.experts.format.name == "int4"  # two of three projections
    assert ct_match("model.layers.3.mlp.experts.0.gate_proj", ["re:.*gate"])
    assert not ct_match("model.layers.3.mlp.experts.0.gate_proj", ["re:.*mlp.gate$"])
    assert hf_excluded("model.layers.0.self_attn.q_proj", ["model.layers.*.self_attn"])
    assert not hf_excluded("model.layers.10.self_attn.q_proj", ["model.layers.1"])


def test_gptq_lm_head_flag_quantizes_the_lm_head():
    m = _with("qwen3-30b-a3b", {"quant_method": "gptq", "bits": 4, "group_size": 128,
                                "lm_head": True})  # fmt: skip
    assert m.quant.lm_head.bytes_per_weight == pytest.approx(INT4_G128_ZERO, rel=1e-12)


GPTQ_BITS = st.sampled_from([2, 3, 4, 8])
GROUPS = st.sampled_from([32, 64, 128, -1])


@settings(max_examples=25)
@given(
    b1=GPTQ_BITS,
    b2=GPTQ_BITS,
    group=GROUPS,
    base=st.sampled_from(["mixtral-8x7b", "qwen3-30b-a3b"]),
)
def test_weight_memory_is_monotone_in_bits(b1, b2, group, base):
    """More bits per weight never means fewer weight bytes (total and per GPU), and no
    quantized model is larger than its bf16 checkpoint."""
    lo, hi = sorted((b1, b2))
    a = _with(base, {"quant_method": "gptq", "bits": lo, "group_size": group})
    b = _with(base, {"quant_method": "gptq", "bits": hi, "group_size": group})
    plain = replace(a, quant=UNQUANTIZED)
    assert a.weight_bytes_total() <= b.weight_bytes_total() < plain.weight_bytes_total()
    if lo < hi:
        assert a.weight_bytes_total() < b.weight_bytes_total()
    assert mem.expert_weight_bytes(a, 4) <= mem.expert_weight_bytes(b, 4)
    assert mem.attn_weight_bytes(a, 2) <= mem.attn_weight_bytes(b, 2)


def test_decode_gemm_time_follows_the_stored_bytes():
    """Roofline on an H100, one token (weight-bound): int4 AWQ / bf16 time above the launch
    floor is the byte ratio in closed form (~ q / 2); with 16k tokens (compute-bound)
    weight-only int4 runs at the bf16 rate, w8a8 at the 2x int8 rate."""
    cm = CostModel(load_cluster("h100-sxm-8"))
    awq = model_from_dict(_data("qwen3_30b_a3b_awq"), "awq")
    w8 = model_from_dict(_data("qwen3_30b_a3b_w8a8"), "w8a8")
    n = k = 8192
    a = cm._roof.alpha
    t16, t4 = cm.gemm(1, n, k), cm.gemm(1, n, k, awq.quant.attention)
    ratio = (4 * k + INT4_G128_ZERO * k * n) / (4 * k + 2 * k * n)
    assert (t4 - a) / (t16 - a) == pytest.approx(ratio, rel=1e-9)
    big_n = 32768  # 2 GiB of bf16 weights: the launch floor is < 1 % of the time
    ratio_raw = cm.gemm(1, big_n, big_n, awq.quant.attention) / cm.gemm(1, big_n, big_n)
    assert ratio_raw == pytest.approx(INT4_G128_ZERO / 2, rel=0.02)
    big = 16384
    assert cm.gemm(big, n, k, awq.quant.attention) == pytest.approx(cm.gemm(big, n, k), rel=1e-12)
    t8 = cm.gemm(big, n, k, w8.quant.attention) - a
    assert t8 / (cm.gemm(big, n, k) - a) == pytest.approx(0.5, rel=1e-9)


def test_decode_grouped_experts_read_the_quantized_bytes():
    """One token per expert on average over 128 local experts: grouped-expert time above the
    floor scales by the experts' bytes ratio against the same model in bf16, over the experts
    the batch hits (N = E / k tokens routed at random hit E (1 - (1 - k/E)^N) of them, each
    with E / hit tokens)."""
    cm = CostModel(load_cluster("h100-sxm-8"))
    awq = model_from_dict(_data("qwen3_30b_a3b_awq"), "awq")
    plain = replace(awq, quant=UNQUANTIZED)
    a = cm._roof.alpha
    q, p = cm.expert_ffn(awq, 1.0, 128) - 2 * a, cm.expert_ffn(plain, 1.0, 128) - 2 * a
    h, i = awq.hidden_size, awq.moe_intermediate_size
    e, k = awq.num_experts, awq.top_k
    m = e / (e * (1 - (1 - k / e) ** (e / k)))  # tokens per expert hit
    act = m * (2 * (h + 2 * i) + 2 * (i + h))  # bf16 inputs and outputs of the two GEMMs
    assert q / p == pytest.approx((act + 3 * h * i * INT4_G128_ZERO) / (act + 6 * h * i), rel=1e-9)


BAD = [
    ({"quant_method": "hqq", "nbits": 4}, ("quant_method", "'hqq'", "not supported")),
    ({"bits": 4}, ("quant_method", "None")),
    ({"quant_method": "gptq", "bits": 4, "group_size": 0}, ("group_size",)),
    ({"quant_method": "awq", "bits": "four"}, ("bits",)),
    ({"quant_method": "bitsandbytes"}, ("load_in_4bit",)),
    ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}, ("quantized_layers",)),
    (
        {"quant_method": "modelopt", "quant_algo": "NVFP8"},
        ("quant_algo", "'NVFP8'", "not supported"),
    ),
    ({"quant_method": "fp8", "weight_block_size": [128]}, ("weight_block_size",)),
    ({**_ct({"num_bits": 4}), "format": "marlin-24"}, ("format", "marlin-24")),
    (_ct({"num_bits": 4, "strategy": "group"}), ("group_size",)),
    ({**_ct({"num_bits": 4}), "ignore": ["re:(a+)+$"]}, ("ignore", "nests quantifiers")),
    ("fp8", ("quantization_config", "object")),
]


@pytest.mark.parametrize("q,needles", BAD)
def test_bad_quantization_config_is_one_line(q, needles):
    with pytest.raises(MoeplanError) as err:
        _with("qwen3-30b-a3b", q)
    text = str(err.value)
    assert "\n" not in text and all(n in text for n in needles), text


def test_unknown_method_through_the_cli_is_exit_2_and_one_line(tmp_path):
    cfg = {**model_config("qwen3-30b-a3b"), "quantization_config": {"quant_method": "hqq"}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    for extra in ([], ["--json"]):
        p = subprocess.run([sys.executable, "-m", "moeplan", "inspect", str(path), *extra],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
        assert p.returncode == 2 and p.stdout == "", p.stdout
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "quant_method ('hqq') is not supported" in lines[0], p.stderr


def test_inspect_json_shows_the_quantization(tmp_path):
    """``moeplan inspect CONFIG --json``: per module class format and bytes; the memory floor
    uses them."""
    p = subprocess.run(
        [sys.executable, "-m", "moeplan", "inspect", str(DATA / "quant_mixtral_8x7b_gptq.json"),
         "--cluster", "h100-sxm-8", "--gpus", "2", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    qz = out["quantization"]
    assert qz["method"] == "gptq"
    assert qz["modules"]["experts"]["bytes_per_weight"] == pytest.approx(INT4_G128_ZERO)
    assert qz["modules"]["experts"]["group_size"] == 128
    assert qz["modules"]["router"]["format"] == "bf16"
    assert sum(r["bytes"] for r in qz["modules"].values()) == pytest.approx(out["weight_bytes"])
    assert out["memory"]["weights_floor_per_gpu"] == pytest.approx(out["weight_bytes"] / 2)
    assert "roofline" in qz["time_source"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 300) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=8,
)
KEYS = ["bits", "w_bit", "group_size", "q_group_size", "zero_point", "lm_head", "dynamic",
        "modules_to_not_convert", "modules_in_block_to_quantize", "weight_block_size",
        "load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant",
        "llm_int8_skip_modules", "format", "config_groups", "ignore", "sparsity_config",
        "quant_algo", "exclude_modules"]  # fmt: skip


@settings(max_examples=examples(150))
@given(
    method=st.sampled_from([*READERS, "HQQ", 3]),
    fields=st.dictionaries(st.sampled_from(KEYS), JSON, max_size=4),
)
def test_mutated_quantization_configs_raise_only_validation_errors(method, fields):
    """Any JSON under the keys the readers use: a model or one MoeplanError line, nothing else."""
    try:
        m = _with("mixtral-8x7b", {"quant_method": method, **fields})
    except MoeplanError as err:
        assert "\n" not in str(err)
        return
    assert 0 < m.weight_bytes_total() <= replace(m, quant=UNQUANTIZED).weight_bytes_total() * 4


ARG_KEYS = ["num_bits", "type", "strategy", "group_size", "block_structure", "symmetric",
            "scale_dtype"]  # fmt: skip
ARG_VALUES = st.one_of(
    JSON, st.sampled_from(["int", "float", "group", "block", "channel", "tensor_group", "128x128"])
)


@settings(max_examples=examples(150))
@given(
    weights=st.dictionaries(st.sampled_from(ARG_KEYS), ARG_VALUES, max_size=6),
    acts=st.none() | st.dictionaries(st.sampled_from(ARG_KEYS), ARG_VALUES, max_size=3),
    targets=st.lists(st.sampled_from(["Linear", "re:.*experts.*", "re:(", "lm_head", ""]),
                     max_size=3),
)  # fmt: skip
def test_mutated_compressed_tensors_groups_raise_only_validation_errors(weights, acts, targets):
    """compressed-tensors groups with any argument values: a model or one error line."""
    q = _ct(weights, acts)
    q["config_groups"]["group_0"]["targets"] = targets
    try:
        m = _with("qwen3-30b-a3b", q)
    except MoeplanError as err:
        assert "\n" not in str(err)
        return
    assert 0 < m.expert_weight_bytes <= 8


@pytest.mark.parametrize("case", ["qwen3_30b_a3b_awq", ("deepseek-v3", None)])
def test_strategy_memory_of_pure_ep_matches_the_quantized_total(case):
    """MixServe's memory with attention DP = MoE EP = 8: each GPU holds every weight but 7/8
    of the routed experts, at their quantized bytes (embedding and lm-head in bf16)."""
    from moeplan.cost import cost_model_for
    from moeplan.planners.layout import Layout
    from moeplan.planners.strategy.cost import StrategyEvaluator
    from moeplan.specs import Workload

    model, cluster = _model(case), load_cluster("h200-sxm-8")
    ev = StrategyEvaluator(
        model, cluster, Workload(batch=1, isl=16, osl=1), cost_model_for(cluster)
    )
    weights = ev.memory(Layout(attn_tp=1, attn_dp=8, moe_tp=1, moe_ep=8)).weights
    routed = model.weight_bytes_by_module()["experts"][1]
    final_norm = 2 * model.hidden_size  # the one weight MixServe's memory leaves out
    want = model.weight_bytes_total() - routed * 7 / 8 - final_norm
    assert weights == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize(
    "q",
    [
        {"quant_method": "fp8", "weight_block_size": [128, 64]},
        _ct(
            {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 64]},
            {"num_bits": 8, "type": "float"},
            format="float-quantized",
        ),  # fmt: skip
    ],
)
def test_a_scale_block_keeps_its_two_sides(q):
    """``weight_block_size`` / ``block_structure`` ``[rows, cols]``: the output side
    (``block_n``) and the input side (``block_k``) both kept, their product the group the
    bytes count; a per-channel FP8 checkpoint has no block."""
    f = _with("qwen3-30b-a3b", q).quant.experts.format
    assert f.block == (128, 64) and f.group_size == 128 * 64
    assert _with("qwen3-30b-a3b", {"quant_method": "fp8"}).quant.experts.format.block == ()
