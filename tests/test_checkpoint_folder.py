"""A Hugging Face checkpoint folder passed as ``--model`` / ``inspect DIR`` reads as its
``config.json`` and the ModelOpt ``hf_quant_config.json`` beside it; a folder without a
``config.json`` is one line naming it (exit 2 from the CLI)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_run import run_main
from moeplan.errors import MoeplanError
from moeplan.specs import load_model

CHECKPOINT = Path(__file__).parent / "data" / "configs" / "nvidia--DeepSeek-V3.1-NVFP4"
NVFP4 = 0.5 + 1 / 16  # bytes per weight: e2m1 + one e4m3 scale per 16 (ModelOpt NVFP4)
BF16 = 2.0


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of an NVFP4 checkpoint's metadata: config.json + hf_quant_config.json."""
    return Path(shutil.copytree(CHECKPOINT, tmp_path / "DeepSeek-V3.1-NVFP4"))


def test_a_folder_is_its_config_json_with_the_quant_config_beside_it(folder, tmp_path):
    """Same spec as the config.json's path; the routed experts are stored in NVFP4 (the
    quant file was read): against the same config without it (bf16), NVFP4 / BF16 bytes."""
    spec = load_model(str(folder))
    assert spec == load_model(str(folder / "config.json"))
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(folder / "config.json", plain / "config.json")
    bf16 = load_model(str(plain))
    assert spec.expert_weight_bytes / bf16.expert_weight_bytes == pytest.approx(NVFP4 / BF16)


def test_inspect_dir_prints_what_inspect_config_json_prints(folder, capsys):
    code, out, err = run_main(capsys, "inspect", str(folder), "--json")
    code2, out2, _ = run_main(capsys, "inspect", str(folder / "config.json"), "--json")
    assert code == code2 == 0, err
    assert json.loads(out) == json.loads(out2)


def test_a_bare_folder_name_in_the_working_folder_is_read(folder, monkeypatch):
    monkeypatch.chdir(folder.parent)
    assert load_model(folder.name) == load_model(str(folder / "config.json"))


def test_a_folder_named_after_a_preset_leaves_the_preset(tmp_path, monkeypatch):
    (tmp_path / "qwen3-30b-a3b").mkdir()  # e.g. an empty download target
    monkeypatch.chdir(tmp_path)
    assert load_model("qwen3-30b-a3b").name == "qwen3-30b-a3b"
    assert load_model("qwen3-30b-a3b").num_experts == 128  # the preset's config.json


@pytest.mark.parametrize("command", ["inspect", "serve-sim", "plan"])
def test_a_folder_without_config_json_is_one_line(tmp_path, capsys, command):
    empty = tmp_path / "weights-only"
    empty.mkdir()
    (empty / "model.safetensors").write_bytes(b"")
    with pytest.raises(MoeplanError, match="holds no config.json"):
        load_model(str(empty))
    args = (
        [str(empty)]
        if command == "inspect"
        else ["--model", str(empty), "--cluster", "h100-sxm-8", "--out", str(tmp_path / "o")]
    )
    if command == "serve-sim":
        args = args[:-2]
    code, out, err = run_main(capsys, command, *args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(empty) in lines[0] and "config.json" in lines[0], err
    assert not (tmp_path / "o").exists()
