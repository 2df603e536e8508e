"""``moeplan plan``'s Sem-MoE placement note for disaggregated winners: a P/D
deployment is two pools of instances; placement targets the pool with expert parallelism,
and "no expert parallelism" is said only when no pool has any."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from moeplan.planners.plan import Plan
from moeplan.search.job.parts import instance_eps
from moeplan.search.job.run import placement_ep as _placement_ep
from moeplan.search.ranking.entries import Entry
from moeplan.serve.layout import ServeLayout
from moeplan.serve.pools.pd import PDLayout
from moeplan.specs import load_model

EP8 = ServeLayout(attn_dp=8, moe_ep=8)
TP8 = ServeLayout(attn_tp=8, moe_tp=8)
TP4 = ServeLayout(attn_tp=4, moe_tp=4)


def _ranking(layout, family="pd"):
    plan = Plan(family="strategy", model="m", cluster="c", layout={"world_size": 8})
    entry = Entry(family=family, label=getattr(layout, "label", "x"), layout=layout, plan=plan)
    return SimpleNamespace(winner=SimpleNamespace(entry=entry))


@pytest.mark.parametrize(
    ("prefill", "decode", "ep"),
    [(EP8, TP8, 8), (TP8, EP8, 8), (EP8, ServeLayout(attn_dp=4, moe_ep=4), 8), (TP8, TP4, 0)],
)
def test_pd_winner_places_on_its_pool_with_expert_parallelism(prefill, decode, ep):
    """The old note read the decode pool only: a PD winner whose prefill pool runs EP8 was
    reported as having no expert parallelism. Oracle: the largest EP over the two pools."""
    layout = PDLayout(prefill=prefill, decode=decode, x=1, y=2)
    assert instance_eps(layout) == [("prefill", prefill.moe_ep), ("decode", decode.moe_ep)]
    got, note = _placement_ep(_ranking(layout), load_model("qwen3-30b-a3b"))
    assert got == ep
    if ep:
        assert note is None
    else:
        assert "no expert parallelism in any instance" in note


def test_colocated_winner_note_is_unchanged():
    got, note = _placement_ep(_ranking(TP8, "strategy"), load_model("qwen3-30b-a3b"))
    assert got == 0 and "has no expert parallelism," in note
    assert _placement_ep(_ranking(EP8, "strategy"), load_model("qwen3-30b-a3b")) == (8, None)


def test_uneven_experts_name_the_pool():
    """mixtral's 8 experts do not divide over a prefill pool's EP16."""
    ep16 = ServeLayout(attn_dp=16, moe_ep=16)
    got, note = _placement_ep(
        _ranking(PDLayout(prefill=ep16, decode=TP8, x=1, y=1)), load_model("mixtral-8x7b")
    )
    assert got == 0 and "prefill instances' EP16" in note
