"""``plan`` places experts for the served winner's real EP degree, or says plainly why not
("Sem-MoE placement on EP8" was once printed for winners without EP or with EP16)."""

from __future__ import annotations

from types import SimpleNamespace

from moeplan.search.job.run import placement_ep as _placement_ep
from moeplan.serve.layout import ServeLayout
from moeplan.specs import load_model


def _ranking(layout: ServeLayout, label: str = "x"):
    return SimpleNamespace(
        winner=SimpleNamespace(entry=SimpleNamespace(layout=layout, label=label))
    )


def test_ep16_winner_is_placed_on_ep16():
    lay = ServeLayout(attn_tp=1, attn_dp=16, moe_tp=1, moe_ep=16)
    assert _placement_ep(_ranking(lay), load_model("deepseek-v3")) == (16, None)


def test_winner_without_ep_skips_with_a_sentence():
    lay = ServeLayout(attn_tp=8, attn_dp=1, moe_tp=8, moe_ep=1)
    ep, note = _placement_ep(_ranking(lay, "attn TP8 / MoE TP8"), load_model("qwen3-30b-a3b"))
    assert ep == 0
    assert note.startswith("Sem-MoE placement skipped") and "no expert parallelism" in note
    assert "attn TP8 / MoE TP8" in note


def test_ep_not_dividing_the_experts_skips_with_a_sentence():
    lay = ServeLayout(attn_tp=1, attn_dp=16, moe_tp=1, moe_ep=16)
    ep, note = _placement_ep(_ranking(lay), load_model("mixtral-8x7b"))  # 8 experts
    assert ep == 0 and "8 experts" in note and "EP16" in note
