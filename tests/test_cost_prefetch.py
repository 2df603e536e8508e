"""Prices fetched ahead in vectorised kernel-table passes (moeplan.cost.prefetch, the iteration
model's octaves, the AFD solver's prefetch) equal the answers of single questions to a cold
cost model, bit for bit; a worker's memo answers come back to the planning process."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moeplan.cost.model import CostModel
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.layout import Layout
from moeplan.search.job.fanout import fan_out, sharing, using
from moeplan.search.job.memo_cost import memo_cost
from moeplan.serve.iteration.grid import bucket
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.serve.iteration.prefetch import octave
from moeplan.specs import load_cluster, load_model


@pytest.fixture(scope="module")
def setup():
    c, m = load_cluster("h100-sxm-8"), load_model("qwen3-30b-a3b")
    return c, m


def _cold(c) -> CostModel:
    return engine_cost_model(c, None, engine="sglang")


class _NoWarm:
    """A cost model's answers without its ahead-of-time methods (the iteration model then
    asks one shape at a time)."""

    def __init__(self, cm: CostModel) -> None:
        self._cm = cm

    def __getattr__(self, name: str):
        if name.startswith("warm_"):
            raise AttributeError(name)
        return getattr(self._cm, name)


def test_octave_is_the_engine_batch_grid():
    """Closed form: sizes up to 64 one by one, then a relative step of 1/32 (batch_grid)."""
    assert octave(1) == (1,)
    assert octave(5) == (4, 5, 6, 7)
    assert octave(63) == tuple(range(32, 64))
    assert octave(100) == tuple(range(64, 128, 2))
    assert octave(300) == tuple(range(256, 512, 8))
    from moeplan.serve.iteration.batch_grid import EXACT_BELOW, _grid_below

    for n in range(1, 3000):  # the grid points the evaluator prices n from are in n's octave
        lo, hi = (n, n) if n <= EXACT_BELOW else _grid_below(n)
        assert lo in octave(n) and (hi in octave(n) or hi == 2 * octave(n)[0])


def test_attention_cores_warmed_equal_each_alone(setup):
    c, m = setup
    ahead, alone = _cold(c), _cold(c)
    seqs = list(range(33, 64, 3))
    ahead.warm_attention_core(m, seqs, 1, 1100, 2)
    for s in seqs:
        assert ahead.attention_core(m, s, 1, 1100, 2) == alone.attention_core(m, s, 1, 1100, 2)
    # a lookup is still counted once per question (the pricing section's counts)
    assert ahead.lookup_counts() == alone.lookup_counts()


@pytest.mark.parametrize("lay", [
    Layout(attn_tp=1, attn_dp=1, moe_tp=1, moe_ep=1),
    Layout(attn_tp=1, attn_dp=2, moe_tp=2, moe_ep=1),
    Layout(attn_tp=2, attn_dp=2, moe_tp=1, moe_ep=4),
])  # fmt: skip
def test_iteration_prices_with_and_without_prefetch_are_equal(setup, lay):
    """Every decode step and a few prefill chunks, priced by a model that fetches octaves ahead
    and by one that asks each shape alone: equal bit for bit."""
    c, m = setup
    ahead = IterationModel(m, c, memo_cost(_cold(c)), lay)
    alone = IterationModel(m, c, _NoWarm(_cold(c)), lay)
    batches = [Batch(b, bucket(x), ()) for b in (1, 7, 40, 64, 66, 130, 250) for x in (900, 1300)]
    batches += [Batch(0, 0, ((1024, 1040),)), Batch(3, bucket(1100), ((512, 520),))]
    for b in batches:
        assert ahead(b) == alone(b), b
    assert ahead._warmed  # it did price ahead


def test_afd_solve_with_prefetch_equals_without(setup):
    """The AFD decode problem's prefetch (expert loads, attention cores) changes no answer."""
    from moeplan.planners.dep.decode import decode_problem
    from moeplan.planners.dep.solver import solve

    c, m = setup
    ahead = decode_problem(m, c, _cold(c), ag=4, eg=4, batch=48, ctx=1100)
    alone = decode_problem(m, c, _cold(c), ag=4, eg=4, batch=48, ctx=1100)
    alone = replace(alone, prefetch=None)
    assert ahead.prefetch is not None
    a, b = solve(ahead), solve(alone)
    assert (a.config, a.makespan, a.tokens, a.times, a.me) == (
        b.config,
        b.makespan,
        b.tokens,
        b.times,
        b.me,
    )


def _price_there(cm, m, marker: list) -> float:
    marker.append(replace(m.quant.attention))  # made in the worker: answers about it stay there
    cm.router(m, 4096)
    cm.gemm(3, 5, 7, marker[-1])
    return cm.expert_ffn(m, 123.0, 128)


def test_a_workers_memo_answers_come_back(setup):
    """What a forked worker adds to a shared memo is absorbed here, equal to pricing it here;
    an answer keyed by an object the worker made (whose id may name another object here)
    is not."""
    from moeplan.commands.workers import forked

    c, m = setup
    cm = memo_cost(_cold(c))
    cm.pin(m)
    made: list = []
    before = cm.mark()[0]
    with sharing(cm), using(forked(2)):
        got = fan_out([lambda: None, lambda: _price_there(cm, m, made)])[1]
    assert not made  # the worker's list stayed in the worker
    names = sorted(k[0] for k in list(cm._memo)[before:])
    assert names == ["expert_ffn", "router"]  # gemm about a worker's object stayed there
    assert got == cm.expert_ffn(m, 123.0, 128) == _cold(c).expert_ffn(m, 123.0, 128)
    assert cm.router(m, 4096) == _cold(c).router(m, 4096)


class _Counting:
    """A cost model that counts the decode-core questions it is asked (blocks per call)."""

    def __init__(self, cm: CostModel) -> None:
        self._cm, self.asked = cm, []

    def decode_core_blocks(self, *args):
        self.asked.append(len(args[2]))
        return self._cm.decode_core_blocks(*args)

    def decode_core_prices(self, *args):
        self.asked.append(1)
        return self._cm.decode_core_prices(*args)


def test_decode_core_blocks_in_one_query_equal_each_block_alone(setup):
    """Several blocks of decode contexts priced in one query give each block's own query's
    prices, bit for bit (each from a cold model); a memo keeps them block by block: a block
    it holds is not priced again, however it is asked."""
    from moeplan.serve.iteration.model import _grid_block

    c, m = setup
    blocks = [_grid_block(0), _grid_block(1023), _grid_block(2047)]
    for seqs in (1, 37, 200):
        alone = [_cold(c).decode_core_prices(m, seqs, b, 1, None) for b in blocks]
        assert _cold(c).decode_core_blocks(m, seqs, blocks, 1, None) == alone
    counting = _Counting(_cold(c))
    memo = memo_cost(counting)
    first = memo.decode_core_blocks(m, 37, blocks[:2], 1, None)
    assert counting.asked == [2]
    assert memo.decode_core_prices(m, 37, blocks[1], 1, None) == first[1]
    assert counting.asked == [2]  # answered by the memo
    assert memo.decode_core_blocks(m, 37, blocks, 1, None)[:2] == first
    assert counting.asked == [2, 1]  # only the third block was priced


def test_tables_shared_across_layouts_change_no_price():
    """Iteration models of many layouts sharing one memo's tables (the mixer blocks of one
    attention TP and KV dtype, asked in an order that prices a context past the decode
    grid's horizon first) price every batch bit for bit as models each with a cold cost
    model of their own; the mixer tables are shared (one per attention TP and KV dtype: a
    model of the same layout with another KV dtype keeps its own)."""
    from moeplan.serve.iteration.instance_knobs import InstanceKnobs

    c, m = load_cluster("h100-sxm-8", 2), load_model("deepseek-v2-lite")
    lays = [
        Layout(attn_tp=tp, attn_dp=g // tp, moe_tp=1, moe_ep=g)
        for g in (2, 4, 8, 16)
        for tp in (1, 2, 4)
        if tp <= g
    ] + [Layout(attn_tp=4, attn_dp=1, moe_tp=4, moe_ep=1)]
    kns = [InstanceKnobs(), InstanceKnobs(kv_dtype="fp8")]
    batches = [
        Batch(300, 200_000, ()),  # a context past the envelope's horizon first
        *(Batch(b, ctx, ()) for b in (1, 7, 64, 100, 513) for ctx in (1, 97, 2049, 2050, 9000)),
        Batch(3, 2049, ((512, 512),)),
        Batch(0, 0, ((2048, 2048), (100, 4000))),
    ]
    memo = memo_cost(_cold(c))
    shared = [IterationModel(m, c, memo, lay, knobs=kn) for lay in lays for kn in kns]
    plain = _cold(c)
    alone = [IterationModel(m, c, plain, lay, knobs=kn) for lay in lays for kn in kns]
    for a, b in zip(shared, alone, strict=True):
        for batch in batches:
            assert a(batch) == b(batch), (a.layout.label, a.knobs.kv_dtype, batch)
    assert len({id(x._attn) for x in shared}) == len({lay.attn_tp for lay in lays}) * len(kns)
