"""Price provenance as shares of priced seconds (:mod:`moeplan.cost.price_sources`).

Oracles: the step's own breakdown (the inter-node DeepEP dispatch and combine are the
transferred seconds of a wide-EP decode step, with the reason that no inter-node table
exists, and the report's trust sentence says so), the step and run times (the seconds add up to them), a cost model with no kernel
tables (every second is roofline), and the documented floor (a price raised to the datasheet
peak is ``roofline``, on the one-row and the many-row path)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from moeplan.cost.kerneldb.rows import own_rows
from moeplan.cost.price_keys import NO_INTERNODE_LL, WHY_NO_ENGINE
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.layout import Layout
from moeplan.report.trust import _trust_sentence
from moeplan.serve.iteration.instance_knobs import resolve_knobs
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.serve.iteration.phase import PhaseModel
from moeplan.serve.iteration.price_sources import (
    layout_run_price_sources,
    phase_price_sources,
    run_classes,
)
from moeplan.specs import load_cluster, load_model

KNOBS = dict(a2a="auto", tbo=None, mtp=0, mtp_accept=None, kv_dtype="auto")


def _knobs(cm, m, c, lay, **kw):
    return resolve_knobs(cm.engine, m, c, lay, **{**KNOBS, **kw})


def _total(ps: dict) -> tuple[float, float]:
    return sum(r["seconds"] for r in ps.values()), sum(r["share"] for r in ps.values())


def test_a_cost_model_without_tables_prices_every_second_roofline() -> None:
    c, m = load_cluster("smidt-a40"), load_model("qwen3-30b-a3b")
    cm = engine_cost_model(c, None, engine=None)
    lay = Layout(attn_dp=c.gpus_per_node, moe_ep=c.gpus_per_node)
    knobs = _knobs(cm, m, c, lay)
    ps = phase_price_sources(m, c, cm, lay, knobs, None, "decode", 32, 2048)
    step = PhaseModel(m, c, cm, lay, knobs, None).step("decode", 32, 2048).step_s
    secs, shares = _total(ps)
    assert ps["roofline"]["share"] == pytest.approx(1.0, abs=1e-12)
    assert shares == pytest.approx(1.0, abs=1e-12)
    assert secs == pytest.approx(step, rel=1e-12)
    assert ps["roofline"]["reason"] == WHY_NO_ENGINE
    assert all(ps[s]["seconds"] == 0.0 for s in ("measured", "interpolated", "transferred"))


def test_measured_tables_split_a_step_that_adds_up() -> None:
    c, m = load_cluster("h100-sxm-8"), load_model("qwen3-30b-a3b")
    cm = engine_cost_model(c, None, engine="sglang")
    lay = Layout(attn_dp=8, moe_ep=8)
    knobs = _knobs(cm, m, c, lay)
    ps = phase_price_sources(m, c, cm, lay, knobs, None, "decode", 64, 2048)
    step = PhaseModel(m, c, cm, lay, knobs, None).step("decode", 64, 2048).step_s
    secs, shares = _total(ps)
    assert shares == pytest.approx(1.0, abs=1e-12)
    assert secs == pytest.approx(step, rel=1e-9)
    assert ps["measured"]["share"] + ps["interpolated"]["share"] > 0.0
    assert ps["measured"]["heldout_error"] in (0.0, None)
    for src in ("interpolated", "transferred"):
        if ps[src]["seconds"] > 0.0:
            assert ps[src]["reason"]


def test_inter_node_deepep_is_the_transferred_share_with_its_reason() -> None:
    """A wide-EP decode step over 4 nodes: DeepEP's dispatch and combine cross nodes, where
    no table exists; their seconds (the step's breakdown) are the transferred seconds."""
    c, m = load_cluster("h100-sxm-8", nodes=4), load_model("deepseek-v3")
    cm = engine_cost_model(c, None, engine="sglang")
    lay = Layout(attn_dp=32, moe_ep=32)
    knobs = _knobs(cm, m, c, lay, a2a="deepep")
    r = PhaseModel(m, c, cm, lay, knobs, None).step("decode", 64, 2048)
    ps = phase_price_sources(m, c, cm, lay, knobs, None, "decode", 64, 2048)
    comm = r.breakdown["dispatch"] + r.breakdown["combine"]
    assert ps["transferred"]["seconds"] == pytest.approx(comm, rel=1e-6)
    assert ps["transferred"]["reason"] == NO_INTERNODE_LL  # decode: the low-latency kernels
    assert ps["transferred"]["heldout_error"] is None  # no held-out rows across nodes
    assert ps["transferred"]["heldout_covers"] == 0.0
    assert _total(ps)[0] == pytest.approx(r.step_s, rel=1e-9)
    said = _trust_sentence(SimpleNamespace(price_sources=ps))
    assert NO_INTERNODE_LL in said and "outside the measured range" not in said


def test_a_run_adds_up_to_its_busy_seconds() -> None:
    """A run's classes carry exactly the run's iteration seconds (fast-forwarded decode
    steps each counted), however each class splits."""
    c, m = load_cluster("h100-sxm-8"), load_model("qwen3-30b-a3b")
    cm = engine_cost_model(c, None, engine="sglang")
    lay = Layout(attn_dp=8, moe_ep=8)
    knobs = _knobs(cm, m, c, lay)
    it = IterationModel(m, c, cm, lay, knobs=knobs)
    batches = [Batch(0, 0, ((1024, 1024),) * 2), Batch(40, 1100, ()), Batch(48, 1200, ()),
               Batch(30, 1100, ((512, 512),)), Batch(3, 1300, ())]  # fmt: skip
    start, dec, pre, dur = [], [], [], []
    t = 0.0
    for b in batches:
        d = it(b)
        for _ in range(3):  # each iteration charged three times
            start.append(t)
            dur.append(d)
            dec.append(b.decode)
            pre.append(sum(q for q, _ in b.prefill))
            t += d
    res = SimpleNamespace(iter_start_s=np.array(start), iter_end_s=np.array(start) + dur,
                          iter_decode=np.array(dec), iter_prefill=np.array(pre),
                          isl=np.array([1024.0]), osl=np.array([256.0]))  # fmt: skip
    classes, seconds = run_classes(res)
    assert math.fsum(seconds) == pytest.approx(math.fsum(dur), rel=1e-12)
    assert len(classes) == 4  # 40 and 48 decode sequences share an octave
    ps = layout_run_price_sources(m, c, cm, lay, knobs, None, res)
    secs, shares = _total(ps)
    assert secs == pytest.approx(math.fsum(dur), rel=1e-9)
    assert shares == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("n", [1, 2], ids=["one-row", "many-rows"])
def test_a_price_raised_to_the_floor_is_roofline(n: int) -> None:
    """Interpolated (shape line) and transferred (bare model) rows below the datasheet peak:
    the floor prices them, so their source is roofline."""
    nan = np.full(n, np.nan)
    for line, src in ((np.full(n, math.log(0.5)), "interpolated"), (nan, "transferred")):
        base = np.full(n, 1.0)
        field = (np.zeros(n), np.zeros(n, bool), np.zeros(n, bool))
        s, got, detail = own_rows("t", (nan, line, nan), base, field, np.full(n, 2.0))
        assert s.tolist() == [2.0] * n
        assert got.tolist() == ["roofline"] * n, src
        above, kept, _ = own_rows("t", (nan, line, nan), base, field, np.full(n, 0.1))
        assert kept.tolist() == [src] * n  # above the floor: its own source


def test_an_accounting_copy_prices_as_the_model() -> None:
    """Unscaled, the copy charges every price the model charges (the decode grid through its
    per-kind path, the rest through the same kernel rows)."""
    from moeplan.cost.price_sources import accounting_copy

    c, m = load_cluster("h100-sxm-8"), load_model("qwen3-30b-a3b")
    cm = engine_cost_model(c, None, engine="sglang")
    copy = accounting_copy(cm)
    ctxs = [1, 17, 900, 1500, 33_000, 200_000]
    assert copy.decode_core_prices(m, 48, ctxs, 2) == cm.decode_core_prices(m, 48, ctxs, 2)
    lay = Layout(attn_dp=8, moe_ep=8)
    knobs = _knobs(cm, m, c, lay)
    b = Batch(30, 1100, ((512, 512),))
    assert IterationModel(m, c, copy, lay, knobs=knobs)(b) == IterationModel(
        m, c, cm, lay, knobs=knobs
    )(b)
