"""Presets reached by the Hugging Face repo id the engines' launch commands name.

Oracles: the model cards' parameter counts; the preset tables themselves."""

from __future__ import annotations

from importlib import resources

import pytest

from moeplan.specs import load_model
from moeplan.specs.presets import PRESETS, REPO_ALIASES, preset_of_repo


@pytest.mark.parametrize(
    ("repo", "preset"),
    [
        ("openai/gpt-oss-20b", "gpt-oss-20b"),
        ("OpenAI/GPT-OSS-120B", "gpt-oss-120b"),
        ("gpt-oss-20b", "gpt-oss-20b"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "qwen3-235b-a22b-fp8"),
        ("no-org/unknown-model", None),
    ],
)
def test_repo_ids_name_their_preset(repo, preset):
    assert preset_of_repo(repo) == preset


def test_every_preset_repo_and_alias_resolves_to_its_preset():
    for name, p in PRESETS.items():
        assert preset_of_repo(p.repo) == name
    for repo, name in REPO_ALIASES.items():
        assert name in PRESETS and preset_of_repo(repo) == name


def test_a_local_path_wins_over_a_repo_id(tmp_path, monkeypatch):
    folder = tmp_path / "openai" / "gpt-oss-20b"
    folder.mkdir(parents=True)
    src = PRESETS["gpt-oss-120b"].file
    text = resources.files("moeplan.specs.presets").joinpath("configs", src).read_text()
    (folder / "config.json").write_text(text)
    monkeypatch.chdir(tmp_path)
    m = load_model("openai/gpt-oss-20b")
    assert m.num_layers == 36  # the folder's (120b) config, not the 20b preset


def test_gpt_oss_20b_sizes_match_the_model_card():
    # openai/gpt-oss-20b model card: 21B parameters, 3.6B active
    m = load_model("openai/gpt-oss-20b")
    assert m.params_total == pytest.approx(20.9e9, rel=0.01)
    assert m.params_active == pytest.approx(3.6e9, rel=0.02)


def test_qwen_fp8_preset_is_the_bf16_network_with_fp8_weights():
    bf16, fp8 = load_model("qwen3-235b-a22b"), load_model("qwen3-235b-a22b-fp8")
    assert fp8.params_total == pytest.approx(bf16.params_total, rel=1e-9)
    assert fp8.weight_bytes_total() < 0.6 * bf16.weight_bytes_total()
