"""``moeplan plan`` on a GPU count that is not a power of two (12 nodes of 8 H100s): the
strategy family is planned with divisor degrees, as ``strategy --any-divisor`` plans it."""

from __future__ import annotations

import pytest

from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners.rank import plan, power_of_two, strategy_candidate
from moeplan.specs import Workload, load_cluster, load_model

MODEL = load_model("deepseek-v3")
CLUSTER = load_cluster("h100-sxm-8", 12)
WORK = Workload(phase="both", batch=32, isl=2000, osl=100)


def test_power_of_two() -> None:
    assert [n for n in range(1, 130) if power_of_two(n)] == [1, 2, 4, 8, 16, 32, 64, 128]


def test_96_gpus_plan_the_strategy_family() -> None:
    """Powers of two alone leave no DeepSeek-V3 shape on 96 GPUs (EP must divide 256 experts
    and span the GPUs); the default (divisor degrees) plans it, on all 96 GPUs."""
    cm = cost_model_for(CLUSTER)
    with pytest.raises(MoeplanError, match="fits no strategy shape"):
        strategy_candidate(MODEL, CLUSTER, WORK, cm, any_divisor=False)
    res = plan(MODEL, CLUSTER, WORK, cm, families=("strategy",))
    assert "strategy" not in res.skipped
    c = res.winner
    assert c.family == "strategy" and c.gpus == 96
    lay = c.plan.layout
    assert MODEL.num_experts % lay["moe"]["ep"] == 0
