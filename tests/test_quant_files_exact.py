"""Every field of a ModelOpt ``hf_quant_config.json`` is read exactly or refused with one line
naming it (exit 2): an unknown or unpriced ``kv_cache_quant_algo`` is never a silent bf16 KV
cache, and the file beside a config.json that states its own ``quantization_config`` is still
read (its ``group_size`` and ``exclude_modules`` checked, and checked to agree)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_run import run_main
from moeplan.specs import load_model

ROOT = Path(__file__).parent / "data" / "configs"
DEEPSEEK = ROOT / "nvidia--DeepSeek-V3.1-NVFP4"  # the quantization in hf_quant_config.json only
QWEN = ROOT / "nvidia--Qwen3.5-122B-A10B-NVFP4"  # both files state it


def _folder(tmp_path: Path, src: Path, **fields) -> Path:
    d = Path(shutil.copytree(src, tmp_path / src.name))
    q = json.loads((d / "hf_quant_config.json").read_text())
    q["quantization"].update(fields)
    (d / "hf_quant_config.json").write_text(json.dumps(q))
    return d


def _refused(capsys, folder: Path, *needles: str) -> None:
    code, _, err = run_main(capsys, "inspect", str(folder), "--json")
    line = err.strip()
    assert code == 2 and "\n" not in line, err
    for n in needles:
        assert n in line, line


@pytest.mark.parametrize("src", [DEEPSEEK, QWEN], ids=["side-only", "both-files"])
@pytest.mark.parametrize("algo", ["BOGUS", 7, "", "NVFP4"])
def test_unpriced_kv_cache_algorithms_are_refused(tmp_path, capsys, src, algo):
    folder = _folder(tmp_path, src, kv_cache_quant_algo=algo)
    _refused(capsys, folder, "hf_quant_config.json", "kv_cache_quant_algo", repr(algo))


def test_nvfp4_kv_cache_says_it_is_not_modelled(tmp_path, capsys):
    _refused(capsys, _folder(tmp_path, DEEPSEEK, kv_cache_quant_algo="NVFP4"), "not modelled")


@pytest.mark.parametrize(
    ("field", "value"),
    [("group_size", "x"), ("group_size", 0), ("group_size", 32), ("exclude_modules", 5),
     ("exclude_modules", ["lm_head"]), ("quant_algo", "BOGUS")],
)  # fmt: skip
def test_the_quant_file_beside_a_quantization_config_is_read(tmp_path, capsys, field, value):
    folder = _folder(tmp_path, QWEN, **{field: value})
    _refused(capsys, folder, "hf_quant_config.json", field if field != "exclude_modules" else "")


def test_the_shipped_folders_still_read_with_fp8_kv(tmp_path):
    for src in (DEEPSEEK, QWEN):
        spec = load_model(str(src))
        assert {x.mixer.kv_bytes for x in spec.layer_specs if x.mixer.has_kv_cache} == {1}
    none = _folder(tmp_path, DEEPSEEK, kv_cache_quant_algo=None)  # not stated: the model's dtype
    assert all(x.mixer.kv_bytes != 1 for x in load_model(str(none)).layer_specs)
