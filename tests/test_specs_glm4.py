"""GLM-4.x (``Glm4MoeForCausalLM``), the multi-token-prediction modules every config declares,
and the lab's model names.

Oracles: the model cards' sizes (GLM-4.5: 355B total / 32B active; GLM-4.5-Air: 106B / 12B;
GLM-4.6 and GLM-4.7 keep GLM-4.5's network), the MTP count each shipped config states under
its family's key, and the Hugging Face repo names of the lab's measured runs
(``shared/data/benchmarks/lab_a100_h100_moe.csv``, column ``model``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import run_main
from moeplan.errors import MoeplanError
from moeplan.specs import load_model, model_from_dict, model_names
from moeplan.specs.presets import model_config

ROOT = Path(__file__).parent / "data" / "configs"

#: preset -> (total, active) in billions from the zai-org model cards (MTP layer excluded)
CARDS = {
    "glm-4.5": (355, 32),
    "glm-4.5-air": (106, 12),
    "glm-4.5-air-fp8": (106, 12),
    "glm-4.6": (355, 32),
    "glm-4.6-fp8": (355, 32),
    "glm-4.7": (355, 32),
}


@pytest.mark.parametrize("name", list(CARDS))
def test_glm_sizes_within_3_percent_of_the_card(name):
    m = load_model(name)
    total, active = CARDS[name]
    assert abs(m.params_total / 1e9 / total - 1) <= 0.03, m.params_total
    assert abs(m.params_active / 1e9 / active - 1) <= 0.03, m.params_active


def test_inspect_glm_4_5_air_reports_the_card_sizes(capsys):
    code, out, err = run_main(capsys, "inspect", "glm-4.5-air", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert abs(data["params_total"] / 106e9 - 1) <= 0.03
    assert abs(data["params_active"] / 12e9 - 1) <= 0.03


def test_glm_4_5_air_layers_as_the_modelling_code_builds_them():
    """Layer 0 dense (first_k_dense_replace 1), 45 MoE layers of 128 sigmoid-routed experts
    with a correction bias and one shared expert; q/k/v biased, no q/k norm (Air), GQA 96/8."""
    m = load_model("glm-4.5-air")
    kinds = [x.ffn.kind for x in m.layer_specs]
    assert kinds == ["dense"] + ["moe"] * 45
    moe = m.layer_specs[1].ffn
    assert (moe.num_experts, moe.top_k, moe.intermediate_size) == (128, 8, 1408)
    assert (moe.router, moe.router_bias, moe.num_shared_experts) == ("sigmoid", True, 1)
    assert m.layer_specs[0].ffn.intermediate_size == 10944
    attn = m.layer_specs[0].mixer
    assert (attn.num_heads, attn.num_kv_heads, attn.head_dim) == (96, 8, 128)
    assert attn.bias and not attn.out_bias and not attn.qk_norm
    assert load_model("glm-4.5").layer_specs[0].mixer.qk_norm  # use_qk_norm: true


def test_glm_kv_cache_is_full_head_dim_gqa():
    """partial_rotary_factor rotates half of each head; the cache keeps K and V whole:
    92 layers x 8 KV heads x 2 x 128 x 2 bytes."""
    assert load_model("glm-4.6").kv_bytes_per_token == 92 * 8 * 2 * 128 * 2


def test_fp8_checkpoints_store_one_byte_per_weight_with_bf16_routers():
    bf16, fp8 = load_model("glm-4.6"), load_model("glm-4.6-fp8")
    assert fp8.quant.experts.bytes_per_weight == 1.0
    assert fp8.quant.attention.bytes_per_weight == 1.0
    assert bf16.quant.experts.bytes_per_weight == 2.0
    assert 0.45 < fp8.weight_bytes_total() / bf16.weight_bytes_total() < 0.55


def _glm(**changes: object) -> dict:
    return {**model_config("glm-4.5-air"), **changes}


@pytest.mark.parametrize(
    ("changes", "needles"),
    [
        ({"n_routed_experts": "128"}, ("n_routed_experts", "'128'")),
        ({"num_experts_per_tok": -8}, ("num_experts_per_tok", "-8")),
        ({"first_k_dense_replace": 46}, ("first_k_dense_replace", "46", "no MoE layer")),
        ({"partial_rotary_factor": 0.0}, ("partial_rotary_factor", "(0, 1]")),
        ({"partial_rotary_factor": 1.5}, ("partial_rotary_factor", "1.5")),
        ({"moe_layer_freq": 2}, ("moe_layer_freq", "2", "no MoE layer step")),
        ({"use_qk_norm": "yes"}, ("use_qk_norm", "'yes'", "true or false")),
        ({"hidden_act": "gelu"}, ("hidden_act", "gelu", "silu")),
        ({"num_nextn_predict_layers": 10**6}, ("num_nextn_predict_layers", "1000000")),
    ],
)
def test_a_corrupted_glm_field_is_refused_naming_it(changes, needles):
    with pytest.raises(MoeplanError) as err:
        model_from_dict(_glm(**changes), name="glm")
    line = str(err.value)
    assert "\n" not in line
    for n in ("config[glm]", *needles):
        assert n in line, line


def test_a_corrupted_glm_config_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_glm(moe_intermediate_size=0)))
    code, out, err = run_main(capsys, "inspect", str(path))
    assert code == 2 and not out and err.strip().count("\n") == 0
    assert "moe_intermediate_size" in err


# ---- multi-token prediction: every config that declares it ---------------------------------
def _declared(cfg: dict) -> int:
    """The MTP count written in the raw config, by hand: its family's key."""
    c = cfg.get("text_config") or cfg
    if c.get("use_mtp") is False:
        return 0
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules"):
        if c.get(key) is not None:
            return c[key]
    return 0


SAMPLES = sorted(p.name for p in ROOT.iterdir() if (p / "config.json").is_file())
DECLARING = [f for f in SAMPLES if _declared(json.loads((ROOT / f / "config.json").read_text()))]


def test_the_families_that_declare_mtp_are_all_sampled():
    """DeepSeek-V3.1/V3.2/V4, GLM-4.x, GLM-5, Qwen3.5, MiniMax-M2.5/M3 and Step-3.7 state MTP
    modules (each under its own key); Kimi-K2.5 states 0."""
    for f in ("deepseek-ai--DeepSeek-V3.2", "zai-org--GLM-5-FP8", "Qwen--Qwen3.5-35B-A3B",
              "zai-org--GLM-4.5-Air", "MiniMaxAI--MiniMax-M2.5", "stepfun-ai--Step-3.7-Flash-FP8",
              "nvidia--Qwen3.5-122B-A10B-NVFP4", "deepseek-ai--DeepSeek-V4-Flash"):  # fmt: skip
        assert f in DECLARING
    assert "moonshotai--Kimi-K2.5" not in DECLARING


@pytest.mark.parametrize("folder", SAMPLES)
def test_each_declared_mtp_count_is_read(folder):
    cfg = json.loads((ROOT / folder / "config.json").read_text())
    assert load_model(str(ROOT / folder / "config.json")).num_nextn_predict_layers == _declared(cfg)


@pytest.mark.parametrize(
    ("name", "mtp"),
    [("deepseek-v3", 1), ("glm-5-fp8", 1), ("qwen3.5-35b-a3b", 1), ("glm-4.5-air", 1),
     ("glm-4.7", 1), ("deepseek-v4-flash", 1), ("kimi-k2.5", 0), ("qwen3-235b-a22b", 0)],
)  # fmt: skip
def test_presets_read_their_mtp_modules(name, mtp):
    assert load_model(name).num_nextn_predict_layers == mtp


def test_use_mtp_false_means_no_mtp_modules():
    cfg = json.loads((ROOT / "MiniMaxAI--MiniMax-M2.5" / "config.json").read_text())
    assert model_from_dict({**cfg, "use_mtp": False}, name="m").num_nextn_predict_layers == 0
    assert model_from_dict(cfg, name="m").num_nextn_predict_layers == 3  # num_mtp_modules


# ---- the lab's model names -------------------------------------------------------------------
#: every distinct ``model`` of lab_a100_h100_moe.csv (126 runs) -> the preset it must load
LAB_MODELS = {
    "zai-org/GLM-4.5-Air": "glm-4.5-air",
    "zai-org/GLM-4.5-Air-FP8": "glm-4.5-air-fp8",
    "zai-org/GLM-4.6-FP8": "glm-4.6-fp8",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": "qwen3-235b-a22b-2507-fp8",
}


@pytest.mark.parametrize("repo", list(LAB_MODELS))
def test_lab_model_names_resolve_to_presets(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file of that name here: the repo name is the preset
    m = load_model(repo)
    assert m.name == LAB_MODELS[repo] and LAB_MODELS[repo] in model_names()
    assert m.params_total == load_model(LAB_MODELS[repo]).params_total


def test_a_folder_of_a_repo_name_still_wins(tmp_path, monkeypatch):
    """A checkpoint downloaded to ``zai-org/GLM-4.5-Air`` is read from disk, not the preset."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "zai-org" / "GLM-4.5-Air"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(_glm(num_hidden_layers=10)))
    assert load_model("zai-org/GLM-4.5-Air").num_layers == 10


def test_fp8_lab_models_are_fp8_checkpoints():
    assert load_model("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8").quant.experts.bytes_per_weight > 1
    assert load_model("zai-org/GLM-4.5-Air-FP8").quant.experts.bytes_per_weight == 1.0


@pytest.mark.parametrize("repo", list(LAB_MODELS))
def test_launch_scripts_load_the_repo_the_lab_named(repo, tmp_path, monkeypatch):
    """``--model Qwen/Qwen3-235B-A22B-Instruct-2507`` plans on Qwen3-235B-A22B's network and
    launches the 2507 checkpoint, not the preset's own repo."""
    from moeplan.export.plan_export import model_path_for

    monkeypatch.chdir(tmp_path)
    assert model_path_for(repo, None) == repo


# ---- engines ---------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_engines_load_glm4_and_split_its_attention_for_dp(engine):
    """SGLang glm4_moe.py Glm4MoeAttention divides its heads by attn_tp_size; vLLM registers
    Glm4MoeForCausalLM (model_executor/models/registry.py)."""
    from moeplan.backends import backend

    b = backend(engine)
    arch = load_model("glm-4.5-air").architecture
    assert arch == "Glm4MoeForCausalLM"
    assert b.model_class_blocker(arch) is None
    assert b.attn_dp_blocker(arch) is None
