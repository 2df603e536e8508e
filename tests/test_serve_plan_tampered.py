"""``serve-sim --plan`` reads a plan.json's layout strictly: every degree a JSON integer in
range, every module kind one the pipeline planner writes, no empty stage list. Before, tp 0,
"4", 4.5, 10^12, kind "conv" and empty stages were accepted and attn.tp 4.7 became 4."""

from __future__ import annotations

import copy

import pytest

from moeplan.commands.serve_plan import layout_from_plan
from moeplan.errors import MoeplanError
from moeplan.planners.plan import Plan

ATTN = {"kind": "attn", "tp": 2, "ep": 1, "dpmoe": 1}
MOE = {"kind": "moe", "tp": 1, "ep": 2, "dpmoe": 1}
PIPE = {"world_size": 4, "pp": 2, "stages": [{"modules": [ATTN, MOE]}] * 2}
STRAT = {"world_size": 8, "attn": {"tp": 4, "dp": 2}, "moe": {"tp": 1, "ep": 8}, "pp": 1}


def _plan(family, layout):
    return Plan(family=family, model="m", cluster="c", layout=layout)


def test_untampered_layouts_read_as_before():
    lay = layout_from_plan(_plan("strategy", STRAT))
    assert (lay.attn_tp, lay.attn_dp, lay.moe_tp, lay.moe_ep, lay.pp) == (4, 2, 1, 8, 1)
    lay = layout_from_plan(_plan("pipeline", PIPE))
    assert (lay.attn_tp, lay.attn_dp, lay.moe_tp, lay.moe_ep, lay.pp) == (2, 1, 1, 2, 2)


@pytest.mark.parametrize("value", [0, -2, "4", 4.5, 4.7, 10**12, True, None])
def test_a_tampered_strategy_degree_is_refused_naming_it(value):
    bad = copy.deepcopy(STRAT)
    bad["attn"]["tp"] = value
    with pytest.raises(MoeplanError, match=r"plan\.layout\.attn\.tp"):
        layout_from_plan(_plan("strategy", bad))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda m: m.update(tp=0), "tp"),
        (lambda m: m.update(tp="4"), "tp"),
        (lambda m: m.update(tp=4.5), "tp"),
        (lambda m: m.update(ep=10**12), "ep"),
        (lambda m: m.update(kind="conv"), "kind"),
        (lambda m: m.update(dpmoe=None), "dpmoe"),
    ],
)
def test_a_tampered_pipeline_module_is_refused_naming_it(change, field):
    bad = copy.deepcopy(PIPE)
    bad["stages"] = [copy.deepcopy(s) for s in bad["stages"]]
    change(bad["stages"][1]["modules"][1])
    with pytest.raises(MoeplanError, match=rf"stages\[1\]\.modules\[1\]\.{field}"):
        layout_from_plan(_plan("pipeline", bad))


@pytest.mark.parametrize(
    "layout",
    [
        {**PIPE, "stages": []},
        {**PIPE, "stages": [{"modules": []}, {"modules": [ATTN]}]},
        {**PIPE, "pp": 3},
        {**STRAT, "attn": [4, 2]},
    ],
)
def test_empty_or_inconsistent_structure_is_refused(layout):
    family = "strategy" if "attn" in layout else "pipeline"
    with pytest.raises(MoeplanError, match=r"plan\.layout"):
        layout_from_plan(_plan(family, layout))
