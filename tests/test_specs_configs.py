"""Every model config under ``tests/data/configs/<folder>/config.json`` (a ModelOpt
``hf_quant_config.json`` beside it where the checkpoint has one): ``moeplan inspect`` exits 0,
parameters match the published sizes (``published.json``), weight storage matches the stored
quantization, and the cache per token / per sequence matches a hand computation from the raw
config keys, written here independently of :mod:`moeplan.specs.layer_math`.

Adding a config: put its folder here and its published sizes in ``published.json``; its
architecture's hand-computed cache goes in :data:`CACHE` (a new architecture needs one).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cli_run import run_main
from moeplan.errors import MoeplanError
from moeplan.specs import load_model

ROOT = Path(__file__).parent / "data" / "configs"
FOLDERS = sorted(p.name for p in ROOT.iterdir() if (p / "config.json").is_file())
PUBLISHED = json.loads((ROOT / "published.json").read_text())
FP8_BLOCK = 1 + 4 / (128 * 128)  # e4m3 + one fp32 scale per 128x128 block
NVFP4 = 0.5 + 1 / 16  # e2m1 + one e4m3 scale per 16 (ModelOpt NVFP4)
MXFP4 = 0.5 + 1 / 32  # e2m1 + one e8m0 scale per 32 (OCP MX)
FP8_CHANNEL = 1.0  # e4m3, one scale per output row (not counted)
INT4_G32 = 0.5 + 2 / 32  # packed int4 + one bf16 scale per 32, symmetric


def raw(folder: str) -> dict:
    c = json.loads((ROOT / folder / "config.json").read_text())
    return c.get("text_config") or c


def run(capsys, *args: str) -> tuple[int, str, str]:
    return run_main(capsys, *args)


def test_every_config_has_published_sizes():
    assert FOLDERS and sorted(k for k in PUBLISHED if not k.startswith("_")) == FOLDERS


@pytest.mark.parametrize("folder", FOLDERS)
def test_inspect_exits_0_and_names_its_towers(capsys, folder):
    code, out, err = run(capsys, "inspect", str(ROOT / folder / "config.json"), "--json")
    assert code == 0, err
    data = json.loads(out)
    has_vision = "vision_config" in json.loads((ROOT / folder / "config.json").read_text())
    assert bool(data["towers"]) == has_vision
    assert all("out of scope" in t["scope"] for t in data["towers"])
    assert sum(r["layers"] for r in data["layer_kinds"]) == raw(folder)["num_hidden_layers"]


def _within(ours: float, pub: dict, key: str) -> None:
    want = pub[key]
    gap = pub.get("known_gap", {}).get(key)
    tol = gap * want if gap is not None else max(0.03 * want, pub["rounded_to"] / 2)
    assert abs(ours - want) <= tol, f"{key}: {ours:.2f}B vs published {want}B (+-{tol:.2f})"


@pytest.mark.parametrize("folder", FOLDERS)
def test_parameters_match_published_sizes(folder):
    m = load_model(str(ROOT / folder / "config.json"))
    pub = PUBLISHED[folder]
    total = m.params_total + (m.params_towers if pub["counts"] == "checkpoint" else 0)
    _within(total / 1e9, pub, "total")
    _within(m.params_active / 1e9, pub, "active")


def _v31_attention() -> float:
    """hf_quant_config excludes q_a, q_b, kv_a, kv_b of every layer: only o_proj is NVFP4."""
    c = raw("nvidia--DeepSeek-V3.1-NVFP4")
    h, nh = c["hidden_size"], c["num_attention_heads"]
    o = nh * c["v_head_dim"] * h
    rest = (
        h * c["q_lora_rank"]
        + c["q_lora_rank"] * nh * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"])
        + h * (c["kv_lora_rank"] + c["qk_rope_head_dim"])
        + c["kv_lora_rank"] * nh * (c["qk_nope_head_dim"] + c["v_head_dim"])
    )
    return (o * NVFP4 + rest * 2) / (o + rest)


#: folder -> (routed experts, attention) bytes per weight as the checkpoint stores them
STORED = {
    "nvidia--DeepSeek-V3.1-NVFP4": (NVFP4, _v31_attention()),
    "nvidia--Qwen3.5-122B-A10B-NVFP4": (NVFP4, None),
    "moonshotai--Kimi-K2.5": (INT4_G32, 2.0),  # ignore re:.*self_attn.*
    "openai--gpt-oss-20b": (MXFP4, 2.0),  # modules_to_not_convert self_attn
    "deepseek-ai--DeepSeek-V4-Flash": (MXFP4, FP8_BLOCK),  # expert_dtype fp4
    "zai-org--GLM-5-FP8": (FP8_BLOCK, None),
    "zai-org--GLM-4.6-FP8": (FP8_CHANNEL, FP8_CHANNEL),
    "deepseek-ai--DeepSeek-V3.2": (FP8_BLOCK, FP8_BLOCK),
    "MiniMaxAI--MiniMax-M2.5": (FP8_BLOCK, FP8_BLOCK),
    "XiaomiMiMo--MiMo-V2-Flash": (FP8_BLOCK, FP8_BLOCK),
    "stepfun-ai--Step-3.7-Flash-FP8": (FP8_BLOCK, FP8_BLOCK),
}


@pytest.mark.parametrize("folder", FOLDERS)
def test_weight_bytes_follow_the_stored_quantization(folder):
    m = load_model(str(ROOT / folder / "config.json"))
    experts, attention = STORED.get(folder, (2.0, 2.0))
    assert m.quant.experts.bytes_per_weight == pytest.approx(experts, rel=1e-9)
    if attention is not None:
        assert m.quant.attention.bytes_per_weight == pytest.approx(attention, rel=1e-9)
    by_class = m.weight_bytes_by_module()
    assert m.weight_bytes_total() == pytest.approx(sum(b for _, b in by_class.values()))
    assert by_class["experts"][1] == pytest.approx(by_class["experts"][0] * experts)


def test_nvfp4_checkpoint_is_about_400_gb_not_1342():
    """The ModelOpt checkpoint states NVFP4 in hf_quant_config.json only: ~0.56 bytes per
    expert weight, not bf16."""
    m = load_model(str(ROOT / "nvidia--DeepSeek-V3.1-NVFP4" / "config.json"))
    assert 350e9 < m.weight_bytes_total() < 450e9
    assert all(x.mixer.kv_bytes == 1 for x in m.layer_specs)  # kv_cache_quant_algo FP8


# ---- cache per token / per sequence, by hand from the raw keys -----------------------------
def _gqa(c, kv=None, hd=None, vd=None, b=2):
    return (
        (kv or c["num_key_value_heads"]) * ((hd or c["head_dim"]) + (vd or hd or c["head_dim"])) * b
    )


def _gdn_state(c):
    nk, nv, dk, dv = (
        c[k]
        for k in (
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
        )
    )
    conv = (c["linear_conv_kernel_dim"] - 1) * (2 * nk * dk + nv * dv) * 2
    return nv * dk * dv * 4 + conv  # fp32 state (mamba_ssm_dtype) + bf16 conv window


def qwen35(c, ctx):
    full = c["layer_types"].count("full_attention")
    lin = c["layer_types"].count("linear_attention")
    per = full * _gqa(c)
    return per, per * ctx + lin * _gdn_state(c)


def nemotron(c, ctx):
    p = c["hybrid_override_pattern"]
    per = p.count("*") * _gqa(c)
    d_in = c["mamba_num_heads"] * c["mamba_head_dim"]
    state = (
        d_in * c["ssm_state_size"] * 4
        + (c["conv_kernel"] - 1) * (d_in + 2 * c["n_groups"] * c["ssm_state_size"]) * 2
    )
    return per, per * ctx + p.count("M") * state


def mla(c, ctx, indexer=False):
    per_layer = (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * 2
    if indexer:  # fp8 index keys + one fp32 scale per 128 values
        per_layer += c["index_head_dim"] + 4 * c["index_head_dim"] // 128
    per = c["num_hidden_layers"] * per_layer
    return per, per * ctx


def windowed(c, ctx, types_key, full_name, window):
    types = c[types_key]
    n_full = sum(1 for t in types if t == full_name)
    per_full, per_win = _gqa(c), _gqa(c)
    per = n_full * per_full + (len(types) - n_full) * per_win
    return per, n_full * per_full * ctx + (len(types) - n_full) * per_win * min(ctx, window)


def gemma4(c, ctx):
    types = c["layer_types"]
    nf = types.count("full_attention")
    full = _gqa(c, kv=c["num_global_key_value_heads"], hd=c["global_head_dim"])
    win = _gqa(c)
    per = nf * full + (len(types) - nf) * win
    return per, nf * full * ctx + (len(types) - nf) * win * min(ctx, c["sliding_window"])


def llama4(c, ctx):
    n = c["num_hidden_layers"]
    nf = n // 4  # NoPE full-attention layers: every 4th
    per = n * _gqa(c)
    return per, nf * _gqa(c) * ctx + (n - nf) * _gqa(c) * min(ctx, c["attention_chunk_size"])


def mimo(c, ctx):
    pat = c["hybrid_layer_pattern"]
    full = _gqa(c, vd=c["v_head_dim"])
    win = _gqa(c, kv=c["swa_num_key_value_heads"], hd=c["swa_head_dim"], vd=c["swa_v_head_dim"])
    nw = sum(pat)
    per = (len(pat) - nw) * full + nw * win
    return per, (len(pat) - nw) * full * ctx + nw * win * min(ctx, c["sliding_window"])


def v4(c, ctx):
    r = c["compress_ratios"][: c["num_hidden_layers"]]
    entry = c["num_key_value_heads"] * c["head_dim"] * 2
    idx = c["index_head_dim"] + 4 * c["index_head_dim"] / 128
    win = min(ctx, c["sliding_window"]) * entry
    per = (
        sum(entry for x in r if x == 0)
        + sum((entry + idx) / 4 for x in r if x == 4)
        + sum(entry / 128 for x in r if x == 128)
    )
    seq = (
        sum(win for x in r if x == 0)
        + sum(math.ceil(ctx / 4) * (entry + idx) + win for x in r if x == 4)
        + sum(math.ceil(ctx / 128) * entry + win for x in r if x == 128)
    )
    return per, seq


def minimax_m3(c, ctx):
    s = c["sparse_attention_config"]
    n_sparse = sum(s["sparse_attention_freq"])
    idx = s["sparse_num_index_heads"] * s["sparse_index_dim"] * 2
    per = c["num_hidden_layers"] * _gqa(c) + n_sparse * idx
    return per, per * ctx


def full_gqa(c, ctx):
    per = c["num_hidden_layers"] * _gqa(
        c, hd=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    )
    return per, per * ctx


CACHE = {
    "MiniMaxAI--MiniMax-M2.5": full_gqa,
    "MiniMaxAI--MiniMax-M3": minimax_m3,
    "Qwen--Qwen3-Coder-480B-A35B-Instruct": full_gqa,
    "Qwen--Qwen3-VL-30B-A3B-Instruct": full_gqa,
    "Qwen--Qwen3.5-35B-A3B": qwen35,
    "nvidia--Qwen3.5-122B-A10B-NVFP4": lambda c, x: (
        tuple(v / 2 for v in qwen35(c, x)[:1])
        + (qwen35(c, x)[0] / 2 * x + (qwen35(c, x)[1] - qwen35(c, x)[0] * x),)
    ),  # fp8 KV cache
    "XiaomiMiMo--MiMo-V2-Flash": mimo,
    "deepseek-ai--DeepSeek-V3.2": lambda c, x: mla(c, x, indexer=True),
    "deepseek-ai--DeepSeek-V4-Flash": v4,
    "google--gemma-4-26B-A4B": gemma4,
    "meta-llama--Llama-4-Scout-17B-16E-Instruct": llama4,
    "mistralai--Mixtral-8x22B-v0.1": full_gqa,
    "moonshotai--Kimi-K2.5": mla,
    "nvidia--DeepSeek-V3.1-NVFP4": lambda c, x: tuple(v / 2 for v in mla(c, x)),  # fp8 KV
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": nemotron,
    "openai--gpt-oss-20b": lambda c, x: windowed(
        c, x, "layer_types", "full_attention", c["sliding_window"]
    ),
    "stepfun-ai--Step-3.7-Flash-FP8": lambda c, x: windowed(
        c, x, "layer_types", "full_attention", c["sliding_window"]
    ),
    "zai-org--GLM-5-FP8": lambda c, x: mla(c, x, indexer=True),
    "zai-org--GLM-4.5": full_gqa,
    "zai-org--GLM-4.5-Air": full_gqa,
    "zai-org--GLM-4.6-FP8": full_gqa,
    "zai-org--GLM-4.7": full_gqa,
}


def test_every_config_has_a_hand_computed_cache():
    assert sorted(CACHE) == FOLDERS


@pytest.mark.parametrize("folder", FOLDERS)
@pytest.mark.parametrize("context", [1000, 131072])
def test_cache_per_token_and_per_sequence_by_hand(folder, context):
    m = load_model(str(ROOT / folder / "config.json"))
    per_token, per_seq = CACHE[folder](raw(folder), context)
    assert m.kv_bytes_per_token == pytest.approx(per_token, rel=1e-9)
    assert m.kv_bytes_for_context(context) == pytest.approx(per_seq, rel=1e-9)


# ---- a 3 MB ModelOpt config -----------------------------------------------------------------
def big_modelopt(folder: Path) -> Path:
    """DeepSeek-V3.1-NVFP4 with every routed expert's projections listed by name in
    ``exclude_modules`` (and the VLM wrappers' ``model.language_model`` spelling of each, as
    ModelOpt writes for those): a >= 3 MB ``hf_quant_config.json``."""
    src = ROOT / "nvidia--DeepSeek-V3.1-NVFP4"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text((src / "config.json").read_text())
    q = json.loads((src / "hf_quant_config.json").read_text())
    c = raw("nvidia--DeepSeek-V3.1-NVFP4")
    names = q["quantization"]["exclude_modules"]
    for prefix in ("model.layers", "model.language_model.layers"):
        for layer in range(c["first_k_dense_replace"], c["num_hidden_layers"]):
            for e in range(c["n_routed_experts"]):
                names += [f"{prefix}.{layer}.mlp.experts.{e}.{p}"
                          for p in ("gate_proj", "up_proj", "down_proj")]  # fmt: skip
    (folder / "hf_quant_config.json").write_text(json.dumps(q, indent=4))
    return folder / "config.json"


def test_3mb_modelopt_config_is_read_whole_and_quickly(tmp_path, capsys):
    """Every expert listed by name is left in bf16 (the names were matched, not dropped);
    ``inspect`` finishes well inside its 1 s target (bench/bench_configs.py: ~0.5 s here)."""
    import time

    path = big_modelopt(tmp_path / "big")
    assert (path.parent / "hf_quant_config.json").stat().st_size >= 3e6
    start = time.perf_counter()
    code, out, err = run(capsys, "inspect", str(path), "--json")
    took = time.perf_counter() - start
    assert code == 0, err
    assert json.loads(out)["quantization"]["modules"]["experts"]["bytes_per_weight"] == 2.0
    assert took < 5.0  # 1 s target; 5 s: a shared 2-core machine


# ---- bad input: one line, exit 2 -----------------------------------------------------------
def _write(tmp_path, cfg: dict, quant: dict | None = None) -> str:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    if quant is not None:
        (d / "hf_quant_config.json").write_text(json.dumps(quant))
    return str(d / "config.json")


def _one_line(capsys, path: str, *needles: str) -> None:
    code, _, err = run(capsys, "inspect", path)
    line = err.strip()
    assert code == 2 and "\n" not in line, err
    for n in needles:
        assert n in line, line


def test_unknown_architecture_names_file_key_value_and_supported(tmp_path, capsys):
    cfg = {**raw("mistralai--Mixtral-8x22B-v0.1"), "architectures": ["FooMoeForCausalLM"]}
    _one_line(
        capsys,
        _write(tmp_path, cfg),
        "config[model].architectures",
        "FooMoeForCausalLM",
        "MixtralForCausalLM",
    )


def test_unknown_layer_kind_is_refused(tmp_path, capsys):
    cfg = json.loads((ROOT / "Qwen--Qwen3.5-35B-A3B" / "config.json").read_text())
    cfg["text_config"]["layer_types"][0] = "mamba_attention"
    _one_line(
        capsys, _write(tmp_path, cfg), "layer_types[0]", "mamba_attention", "linear_attention"
    )


def test_shape_key_moeplan_does_not_model_is_refused(tmp_path, capsys):
    cfg = json.loads((ROOT / "google--gemma-4-26B-A4B" / "config.json").read_text())
    cfg["text_config"]["num_kv_shared_layers"] = 10
    _one_line(capsys, _write(tmp_path, cfg), "num_kv_shared_layers", "10", "not modelled")


def test_heads_times_head_dim_must_fit_the_layer(tmp_path, capsys):
    """Gemma-4 requires num_attention_heads divisible by its K/V heads; a bad count is one
    line naming the field."""
    cfg = json.loads((ROOT / "google--gemma-4-26B-A4B" / "config.json").read_text())
    cfg["text_config"]["num_key_value_heads"] = 3
    _one_line(capsys, _write(tmp_path, cfg), "num_heads (16)", "num_kv_heads (3)")


def test_hidden_must_be_heads_times_head_dim_without_head_dim(tmp_path, capsys):
    """Mixtral has no head_dim key: its attention splits the hidden size over the heads."""
    cfg = {**raw("mistralai--Mixtral-8x22B-v0.1"), "num_attention_heads": 47}
    _one_line(capsys, _write(tmp_path, cfg), "hidden_size (6144)", "num_attention_heads (47)")


def test_contradicting_quantization_files_are_one_line(tmp_path, capsys):
    cfg = raw("nvidia--DeepSeek-V3.1-NVFP4")
    cfg = {**cfg, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    quant = json.loads((ROOT / "nvidia--DeepSeek-V3.1-NVFP4" / "hf_quant_config.json").read_text())
    _one_line(
        capsys, _write(tmp_path, cfg, quant), "quant_method 'fp8'", "hf_quant_config.json", "NVFP4"
    )


def test_infinity_is_read_and_refused_only_where_moeplan_reads_it(tmp_path):
    cfg = json.loads(
        (ROOT / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" / "config.json").read_text()
    )
    text = json.dumps({**cfg, "time_step_limit": [0.0, float("inf")]})
    d = tmp_path / "ok"
    d.mkdir()
    (d / "config.json").write_text(text)
    assert "Infinity" in text and load_model(str(d / "config.json")).num_layers == 52
    (d / "config.json").write_text(json.dumps({**cfg, "ssm_state_size": float("inf")}))
    with pytest.raises(MoeplanError, match="ssm_state_size"):
        load_model(str(d / "config.json"))
