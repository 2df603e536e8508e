"""The ``moeplan dep`` path prices a fresh instance's expert tasks in one vectorised pass
(before: one kernel-table pass per task, ~300 on findep-a, 1.5 s of a 1.5 s CLI "solve"),
with the same answers, and reports the kernel-table warm-up and the whole wait apart."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from moeplan.kernel_tables import engine_cost_model
from moeplan.planners import dep
from moeplan.planners.dep.planner import plan_dep, report_dict, warm_pricing
from moeplan.specs import load_cluster, load_model


@pytest.fixture(scope="module")
def setup():
    m, cl = load_model("deepseek-v2"), load_cluster("findep-a")
    cm = engine_cost_model(cl, None, engine="sglang")
    warm_pricing(m, cm, 1024)
    return m, cl, cm


def _problem(setup, seq):
    m, cl, cm = setup
    return dep.dep_problem(m, cl, cm, ag=3, eg=5, seq_len=seq, layers=8, batch=64)


def test_warm_memoises_exactly_what_predict_answers(setup):
    m, _, cm = setup
    from moeplan.cost.kerneldb.pricing import moe_shape

    db, dev = cm._kdb, cm._device
    shapes = [moe_shape(m, x, 32, 1) for x in (0.7, 3.0, 11.5, 97.25, 1500.0)]
    one_by_one = [
        db.predict_many("moe", dev, "sglang", {k: np.asarray([v]) for k, v in s.items()})[0]
        for s in shapes
    ]
    db._memo.clear()
    db.warm("moe", dev, "sglang", shapes)
    assert [db.predict("moe", dev, "sglang", **s) for s in shapes] == one_by_one


def test_the_prefetch_changes_no_answer(setup):
    for seq in (1024, 777):
        with_prefetch = dep.solve(_problem(setup, seq))
        plain = dep.solve(dataclasses.replace(_problem(setup, seq), prefetch=None))
        assert with_prefetch.config == plain.config
        assert with_prefetch.makespan == plain.makespan


def test_a_fresh_solve_makes_a_handful_of_kernel_table_passes(setup, monkeypatch):
    """Before: one predict_many per distinct expert task (~300); now one for all of them plus
    the attention side (one per prompt count ``ma``)."""
    db = setup[2]._kdb
    calls = []
    real = type(db).predict_many

    def counted(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(type(db), "predict_many", counted)
    p = _problem(setup, 1111)
    dep.solve(p)
    assert len(calls) <= p.ma_max + 2, len(calls)


def test_the_report_says_what_the_user_waited_for(setup):
    m, cl, cm = setup
    r = plan_dep(m, cl, cm, seq_len=512, ag=3, eg=5, layers=4)
    d = report_dict(r)
    assert d["wall_ms"] >= d["search_ms"] + d["warmup_ms"] - 1e-6
    assert d["search_ms"] >= d["solve_ms"]


def test_a_batch_cap_no_engine_runs_is_refused_in_one_line(setup):
    from moeplan.errors import MoeplanError

    m, cl, cm = setup
    with pytest.raises(MoeplanError, match=r"max batch \(1000000000\) must be in 1\.\.4096"):
        plan_dep(m, cl, cm, seq_len=1024, ag=3, eg=5, layers=8, batch=10**9)


def test_a_batch_cap_whose_baselines_are_intractable_is_refused_before_planning():
    """findep-d, 128-token prompts, cap 4,096: PPPipe's brute force over (ma, r1) on 31 splits
    ran past 300 s; now refused after counting the grid (no schedule priced)."""
    from moeplan.errors import MoeplanError

    cl = load_cluster("findep-d")
    cm = engine_cost_model(cl, None, engine="sglang")
    with pytest.raises(MoeplanError, match="lower --max-batch"):
        plan_dep(load_model("deepseek-v2"), cl, cm, seq_len=128, layers=8, batch=4096)
