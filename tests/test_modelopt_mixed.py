"""ModelOpt checkpoints read exactly: ``MIXED_PRECISION`` honours every module's entry of
``quantized_layers`` (a module it does not name stays bf16), every ModelOpt ``quant_algo``
has its closed-form bytes per weight, and an algorithm moeplan does not know is refused with
one line (exit 2), never guessed.

The maps are written the way ModelOpt exports them (``modelopt/torch/export/quant_utils.py``
``process_layer_quant_config``: one ``{quant_algo, group_size}`` per module prefix) over the
real DeepSeek-V3.1 and DeepSeek-V4-Flash configs shipped in tests/data/configs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_run import run_main
from moeplan.specs import load_model
from moeplan.specs.quant_modules import linear_modules

ROOT = Path(__file__).parent / "data" / "configs"
V31 = ROOT / "nvidia--DeepSeek-V3.1-NVFP4"
V4 = ROOT / "deepseek-ai--DeepSeek-V4-Flash"
NVFP4 = 0.5 + 1 / 16  # e2m1 + one e4m3 scale per 16 (ModelOpt NVFP4QTensor)
FP8 = 1.0  # e4m3, one fp32 scale per tensor (not counted)
W4A8_AWQ_G128 = 0.5 + 2 / 128  # packed int4, one 2-byte scale per 128, no zero point


def _mixed(tmp_path: Path, src: Path, layers_of, **extra) -> Path:
    """A copy of ``src``'s config.json with an ``hf_quant_config.json`` whose
    ``quantized_layers`` maps each linear module name ``layers_of(cls, name)`` returns
    (``None``: left out, so unquantized)."""
    d = tmp_path / src.name
    d.mkdir()
    shutil.copy(src / "config.json", d / "config.json")
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("quantization_config", None)
    (d / "config.json").write_text(json.dumps(cfg))
    spec = load_model(str(d / "config.json"))
    layers = {}
    for cls, name, _ in linear_modules(spec):
        entry = layers_of(cls, name)
        if entry is not None:
            layers[name] = entry
    q = {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8", "quantized_layers": layers}
    q.update(extra)
    (d / "hf_quant_config.json").write_text(
        json.dumps({"producer": {"name": "modelopt"}, "quantization": q})
    )
    return d


def _deepseek_map(cls: str, name: str):
    """NVIDIA's DeepSeek recipe: routed experts NVFP4, attention output FP8, shared experts
    W4A8 AWQ; the other attention projections and the lm-head are not listed."""
    if cls == "experts":
        return {"quant_algo": "NVFP4", "group_size": 16}
    if cls == "shared":
        return {"quant_algo": "W4A8_AWQ", "group_size": 128, "has_zero_point": False}
    if name.endswith("o_proj"):
        return {"quant_algo": "FP8"}
    return None


def _weighted(spec, cls: str, bpw_of) -> float:
    mods = [(name, n) for c, name, n in linear_modules(spec) if c == cls]
    return sum(n * bpw_of(name) for name, n in mods) / sum(n for _, n in mods)


def test_every_layer_of_the_map_is_honoured(tmp_path):
    m = load_model(str(_mixed(tmp_path, V31, _deepseek_map) / "config.json"))
    q = m.quant
    assert q.method == "modelopt"
    assert q.experts.bytes_per_weight == pytest.approx(NVFP4, rel=1e-12)
    assert q.experts.format.kernel_dtype == "nvfp4" and q.experts.format.group_size == 16
    assert q.shared.bytes_per_weight == pytest.approx(W4A8_AWQ_G128, rel=1e-12)
    assert q.shared.format.compute == "fp8"
    attn = _weighted(m, "attention", lambda name: FP8 if name.endswith("o_proj") else 2.0)
    assert q.attention.bytes_per_weight == pytest.approx(attn, rel=1e-12)
    assert q.lm_head.bytes_per_weight == 2.0  # not in the map: unquantized
    assert 1.0 < attn < 2.0  # both formats weigh in


def test_one_layer_changed_changes_exactly_its_bytes(tmp_path):
    """Layer 5's experts FP8 instead of NVFP4: the experts' mean moves by exactly that
    layer's share (the map is read per module, not per class)."""

    def mapping(cls, name):
        if cls == "experts" and ".layers.5." in name:
            return {"quant_algo": "FP8"}
        return _deepseek_map(cls, name)

    m = load_model(str(_mixed(tmp_path, V31, mapping) / "config.json"))
    want = _weighted(m, "experts", lambda name: FP8 if ".layers.5." in name else NVFP4)
    assert m.quant.experts.bytes_per_weight == pytest.approx(want, rel=1e-12)
    assert m.quant.experts.bytes_per_weight > NVFP4


def test_exclude_modules_still_win(tmp_path):
    d = _mixed(tmp_path, V31, _deepseek_map, exclude_modules=["model.layers.*.mlp.experts*"])
    assert load_model(str(d / "config.json")).quant.experts.bytes_per_weight == 2.0


def test_a_fused_parent_entry_covers_its_experts(tmp_path):
    """A map listing ``...mlp.experts`` (a fused 3D expert tensor) covers every expert."""

    def mapping(cls, name):
        return None if cls == "experts" else _deepseek_map(cls, name)

    d = _mixed(tmp_path, V31, mapping)
    q = json.loads((d / "hf_quant_config.json").read_text())
    for layer in range(3, 61):
        q["quantization"]["quantized_layers"][f"model.layers.{layer}.mlp.experts"] = {
            "quant_algo": "NVFP4", "group_size": 16,
        }  # fmt: skip
    (d / "hf_quant_config.json").write_text(json.dumps(q))
    m = load_model(str(d / "config.json"))
    assert m.quant.experts.bytes_per_weight == pytest.approx(NVFP4, rel=1e-12)


def test_deepseek_v4_nvfp4_experts_are_not_read_as_its_mxfp4(tmp_path):
    """DeepSeek-V4's config states ``expert_dtype: fp4`` for DeepSeek's own MXFP4 experts
    (0.53125 B/weight); a ModelOpt NVFP4 re-quantization states its experts itself."""
    cfg = json.loads((V4 / "config.json").read_text())
    assert cfg.get("expert_dtype") == "fp4"
    m = load_model(str(_mixed(tmp_path, V4, _deepseek_map) / "config.json"))
    assert m.quant.experts.bytes_per_weight == pytest.approx(NVFP4, rel=1e-12)
    assert m.quant.experts.format.kernel_dtype == "nvfp4"


@pytest.mark.parametrize(
    ("algo", "group", "bpw", "compute", "kernel"),
    [
        ("NVFP4", 16, 0.5 + 1 / 16, "fp8", "nvfp4"),
        ("NVFP4_AWQ", 16, 0.5 + 1 / 16, "fp8", "nvfp4"),
        ("W4A16_NVFP4", 16, 0.5 + 1 / 16, "bf16", "int4_wo"),
        ("W4A16_AWQ", 128, 0.5 + 2 / 128, "bf16", "int4_wo"),
        ("W4A8_AWQ", 64, 0.5 + 2 / 64, "fp8", "int4_wo"),
        ("FP8", None, 1.0, "fp8", "fp8"),
        ("FP8_PER_CHANNEL_PER_TOKEN", None, 1.0, "fp8", "fp8"),
        ("W8A8_SQ_PER_CHANNEL", None, 1.0, "int8", "int8"),
        ("W4A8_MXFP4_FP8", 32, 0.5 + 1 / 32, "fp8", "w4a8_mxfp4_mxfp8"),
        ("MXFP8", 32, 1 + 1 / 32, "fp8", "fp8_block"),
    ],
)  # fmt: skip
def test_each_algorithm_closed_form(tmp_path, algo, group, bpw, compute, kernel):
    entry = {"quant_algo": algo} | ({"group_size": group} if group else {})
    d = _mixed(tmp_path, V31, lambda c, n: entry if c == "experts" else None)
    f = load_model(str(d / "config.json")).quant.experts
    assert f.bytes_per_weight == pytest.approx(bpw, rel=1e-12)
    assert (f.format.compute, f.format.kernel_dtype) == (compute, kernel)


def test_an_unknown_algorithm_of_one_layer_is_refused(tmp_path, capsys):
    def mapping(cls, name):
        if name == "model.layers.7.mlp.experts.0.down_proj":
            return {"quant_algo": "NVFP6", "group_size": 16}
        return _deepseek_map(cls, name)

    d = _mixed(tmp_path, V31, mapping)
    code, out, err = run_main(capsys, "inspect", str(d), "--json")
    line = err.strip()
    assert code == 2 and out == "" and "\n" not in line, err
    assert "quantized_layers['model.layers.7.mlp.experts.0.down_proj'].quant_algo" in line
    assert "'NVFP6'" in line and "not supported" in line


def test_an_empty_map_is_refused(tmp_path, capsys):
    d = _mixed(tmp_path, V31, lambda c, n: None)
    code, _, err = run_main(capsys, "inspect", str(d), "--json")
    assert code == 2 and "quantized_layers" in err and "\n" not in err.strip()


def test_entries_under_one_module_that_disagree_are_refused(tmp_path, capsys):
    """Two entries under one module moeplan weighs (children of an expert projection) with
    different algorithms: that module has no single format, so its bytes are not guessed."""

    def mapping(cls, name):
        return None if cls == "experts" else _deepseek_map(cls, name)

    d = _mixed(tmp_path, V31, mapping)
    q = json.loads((d / "hf_quant_config.json").read_text())
    qlay = q["quantization"]["quantized_layers"]
    qlay["model.layers.3.mlp.experts.0.gate_proj.part0"] = {"quant_algo": "NVFP4"}
    qlay["model.layers.3.mlp.experts.0.gate_proj.part1"] = {"quant_algo": "FP8"}
    (d / "hf_quant_config.json").write_text(json.dumps(q))
    code, _, err = run_main(capsys, "inspect", str(d), "--json")
    assert code == 2 and "one module must have one format" in err and "\n" not in err.strip()


def test_top_level_nvfp4_reads_0_5625(tmp_path):
    """The shipped DeepSeek-V3.1-NVFP4 (quant_algo NVFP4 + exclude list): experts NVFP4 with
    the tables' ``nvfp4`` dtype."""
    m = load_model(str(V31 / "config.json"))
    assert m.quant.experts.bytes_per_weight == pytest.approx(NVFP4, rel=1e-12)
    assert m.quant.experts.format.kernel_dtype == "nvfp4"


GEMMA4 = ROOT / "google--gemma-4-26B-A4B"


def _gemma(tmp_path: Path, quantization: dict) -> Path:
    d = tmp_path / GEMMA4.name
    d.mkdir()
    shutil.copy(GEMMA4 / "config.json", d / "config.json")
    (d / "hf_quant_config.json").write_text(
        json.dumps({"producer": {"name": "modelopt"}, "quantization": quantization})
    )
    return d


def test_gemma4_experts_are_their_own_modules(tmp_path):
    """Gemma-4 keeps its routed experts as ``layers.N.experts.{gate_up,down}_proj`` beside a
    dense ``layers.N.mlp``: an NVFP4 checkpoint that leaves attention, the dense MLP and the
    router in bf16 (``...mlp*`` excluded) stores the experts at 0.5625 B/weight, not bf16."""
    q = {
        "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
        "exclude_modules": [
            "lm_head", "model.language_model.layers.*.self_attn*",
            "model.language_model.layers.*.mlp*", "model.language_model.layers.*.router*",
            "model.vision_tower*", "model.embed_vision*",
        ],
    }  # fmt: skip
    m = load_model(str(_gemma(tmp_path, q) / "config.json"))
    assert m.quant.experts.bytes_per_weight == pytest.approx(NVFP4, rel=1e-12)
    assert m.quant.shared.bytes_per_weight == 2.0  # the dense MLP
    assert m.quant.attention.bytes_per_weight == 2.0
    bf16 = load_model(str(GEMMA4 / "config.json"))
    assert m.expert_weight_bytes / bf16.expert_weight_bytes == pytest.approx(NVFP4 / 2)


def test_gemma4_unfused_expert_entries_cover_the_fused_experts(tmp_path):
    """A MIXED_PRECISION map listing unfused ``experts.E.gate_proj`` entries (ModelOpt
    quantizes Gemma-4's experts unfused) covers moeplan's fused expert modules."""
    layers = {
        f"model.language_model.layers.{n}.experts.{e}.{p}": {"quant_algo": "NVFP4", "group_size": 16}
        for n in range(30) for e in range(2) for p in ("gate_proj", "up_proj", "down_proj")
    }  # fmt: skip
    layers |= {
        f"model.language_model.layers.{n}.mlp.{p}": {"quant_algo": "FP8"}
        for n in range(30) for p in ("gate_proj", "up_proj", "down_proj")
    }  # fmt: skip
    q = {"quant_algo": "MIXED_PRECISION", "quantized_layers": layers}
    m = load_model(str(_gemma(tmp_path, q) / "config.json"))
    assert m.quant.experts.bytes_per_weight == pytest.approx(NVFP4, rel=1e-12)
    assert m.quant.shared.bytes_per_weight == pytest.approx(FP8, rel=1e-12)
    assert m.quant.attention.bytes_per_weight == 2.0


def test_a_null_quant_algo_is_unquantized_weights_and_a_missing_one_refused(tmp_path, capsys):
    """ModelOpt writes ``quant_algo: null`` when it quantized only the KV cache."""
    d = _gemma(tmp_path, {"quant_algo": None, "kv_cache_quant_algo": "FP8"})
    m = load_model(str(d / "config.json"))
    assert m.quant.experts.bytes_per_weight == 2.0 and m.quant.attention.bytes_per_weight == 2.0
    (d / "hf_quant_config.json").write_text(json.dumps({"quantization": {"group_size": 16}}))
    code, _, err = run_main(capsys, "inspect", str(d), "--json")
    assert code == 2 and "quant_algo" in err and "\n" not in err.strip()
