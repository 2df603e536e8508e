"""Two-batch overlap (cost/overlap.alternating_makespan, serve/iteration/tbo.py, the TBO step of
serve/iteration/phase.py and model.py): the schedule non-decreasing in every input, within
its bounds, SGLang's split rule on hand-worked batches, and no overlap where SGLang runs
one batch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeplan.cost.overlap import Piece, alternating_makespan
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import resolve_knobs
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.serve.iteration.phase import PhaseModel, prefill_batch
from moeplan.serve.iteration.tbo import extend_cut, tbo_halves
from moeplan.specs import load_cluster, load_model

DSV3 = load_model("deepseek-v3")
times = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)
layer = st.lists(st.tuples(st.sampled_from(["compute", "comm"]), times), min_size=1, max_size=5)


def _chains(a, b, layers):
    return [[Piece(r, s) for r, s in a] * layers, [Piece(r, s) for r, s in b] * layers]


@settings(max_examples=200, deadline=None)
@given(layer, st.data(), st.integers(1, 4), st.floats(0.0, 5.0))
def test_alternating_schedule_non_decreasing_in_every_piece(a, data, layers, bump):
    b = data.draw(st.lists(st.tuples(st.sampled_from(["compute", "comm"]), times),
                           min_size=len(a), max_size=len(a)))  # fmt: skip
    base = alternating_makespan(_chains(a, b, layers))
    i = data.draw(st.integers(0, 2 * len(a) - 1))
    a2, b2 = list(a), list(b)
    side, j = (a2, i) if i < len(a) else (b2, i - len(a))
    side[j] = (side[j][0], side[j][1] + bump)
    bumped = alternating_makespan(_chains(a2, b2, layers))
    assert bumped >= base - 1e-9
    # a longest path: one piece longer by d lengthens it by at most d per copy of the piece
    assert bumped <= base + layers * bump + 1e-9


@given(layer, layer, st.integers(1, 4))
def test_alternating_schedule_bounds(a, b, layers):
    chains = _chains(a, b, layers)
    span = alternating_makespan(chains)
    total = sum(p.seconds for c in chains for p in c)
    per_resource = {
        r: sum(p.seconds for c in chains for p in c if p.resource == r) for r in ("compute", "comm")
    }
    assert span <= total + 1e-9
    assert span >= max(per_resource.values()) - 1e-9
    assert span >= max(sum(p.seconds for p in c) for c in chains) - 1e-9


def test_alternating_schedule_hand_worked():
    """Compute 2 s then comm 1 s per layer: A computes [0, 2], B [2, 4] while A communicates
    [2, 3], B communicates [4, 5]; a second layer: A computes [4, 6], B [6, 8], B's comm
    ends at 9."""
    one = [Piece("compute", 2.0), Piece("comm", 1.0)]
    assert alternating_makespan([one, one]) == 5.0
    assert alternating_makespan([one * 2, one * 2]) == 9.0


@pytest.mark.parametrize(
    "lens,cut",
    [
        # balanced boundary after two prompts: 8,000 of 16,384 = 48.8 %, inside 48-52 %
        ([4000, 4000, 4000, 4000, 384], 8000),
        ([100, 100], 100),
        # boundary after the first: 75 % of the tokens, outside: cut at half the tokens
        ([3000, 1000], 2000),
        ([1000], 500),  # one prompt: two chunks of 500
        ([7], 3),
        ([1], None),  # one token: one micro-batch
    ],
)
def test_extend_split_is_sglangs(lens, cut):
    assert extend_cut(lens) == cut


def test_decode_split_and_fallback():
    assert tbo_halves(Batch(1, 900, ())) is None  # SGLang: bs // 2 = 0, one batch
    assert tbo_halves(Batch(2, 900, ())) == (Batch(1, 900, ()), Batch(1, 900, ()))
    assert tbo_halves(Batch(5, 900, ())) == (Batch(2, 900, ()), Batch(3, 900, ()))
    a, b = tbo_halves(Batch(0, 0, ((1000, 1000),)))
    assert a == Batch(0, 0, ((500, 500),)) and b == Batch(0, 0, ((500, 1000),))


@pytest.fixture(scope="module")
def h200():
    c = load_cluster("h200-sxm-8", 1)
    return c, engine_cost_model(c, engine="sglang")


def _iteration(h200, tbo, kv="auto"):
    c, cm = h200
    lay = Layout(attn_dp=8, moe_ep=8)
    kn = resolve_knobs("sglang", DSV3, c, lay, a2a="deepep", tbo=tbo, kv_dtype=kv)
    return IterationModel(DSV3, c, cm, lay, knobs=kn)


def test_one_sequence_per_rank_runs_one_batch(h200):
    """Every DP rank with one decode sequence: no overlap, the plain step exactly."""
    on, off = _iteration(h200, True), _iteration(h200, False)
    batch = Batch(8, 2000, ())
    assert "overlap" not in on.breakdown(batch)
    assert on(batch) == off(batch)


def test_one_prompt_per_rank_is_split_not_doubled(h200):
    """A prompt per rank is cut in two micro-batches of half its tokens: the overlapped step's
    MoE and communication are those of the same tokens, not of the prompt twice."""
    on, off = _iteration(h200, True), _iteration(h200, False)
    batch = Batch(0, 0, ((2000, 2000),) * 8)
    b_on, b_off = on.breakdown(batch), off.breakdown(batch)
    assert b_on["comm"] < 1.5 * b_off["comm"]
    assert on(batch) < 1.6 * off(batch)


@settings(max_examples=12, deadline=None)
@given(st.integers(2, 256), st.integers(1, 64), st.integers(100, 8000), st.integers(0, 4000))
def test_tbo_iteration_non_decreasing_in_batch_and_context(h200_model, seqs, more, ctx, extra):
    it = h200_model
    base = it(Batch(seqs * 8, ctx, ()))
    assert it(Batch((seqs + more) * 8, ctx, ())) >= base * (1 - 2e-3)
    assert it(Batch(seqs * 8, ctx + extra, ())) >= base * (1 - 2e-3)


@pytest.fixture(scope="module")
def h200_model(h200):
    return _iteration(h200, True)


@pytest.mark.parametrize("seqs,ctx", [(16, 2000), (64, 4000), (128, 4096)])
def test_bf16_kv_adds_no_more_step_than_attention(h200, seqs, ctx):
    """bf16 KV reads more than fp8 KV; under TBO the step grows by at most the attention it
    adds (a longest path grows by at most the pieces that grew)."""
    c, cm = h200
    lay = Layout(attn_dp=8, moe_ep=8)
    steps = {}
    for kv in ("fp8", "bf16"):
        kn = resolve_knobs("sglang", DSV3, c, lay, a2a="deepep", tbo=True, kv_dtype=kv)
        steps[kv] = PhaseModel(DSV3, c, cm, lay, kn).step("decode", seqs, ctx)
    d_attn = steps["bf16"].breakdown["attention"] - steps["fp8"].breakdown["attention"]
    d_step = steps["bf16"].step_s - steps["fp8"].step_s
    assert d_attn >= 0 and -1e-12 <= d_step <= d_attn + 1e-12


def test_phase_decode_one_sequence_is_the_plain_step(h200):
    c, cm = h200
    lay = Layout(attn_dp=8, moe_ep=8)
    steps = []
    for tbo in (True, False):
        kn = resolve_knobs("sglang", DSV3, c, lay, a2a="deepep", tbo=tbo)
        steps.append(PhaseModel(DSV3, c, cm, lay, kn).step("decode", 1, 2000))
    assert "overlap" not in steps[0].breakdown
    assert steps[0].step_s == pytest.approx(steps[1].step_s, rel=1e-12)


@settings(max_examples=10, deadline=None)
@given(st.integers(2, 64), st.integers(1, 32), st.integers(256, 4000), st.integers(0, 1000))
def test_phase_tbo_decode_non_decreasing(h200_phase, seqs, more, ctx, extra):
    pm = h200_phase
    base = pm.step("decode", seqs, ctx).step_s
    assert pm.step("decode", seqs + more, ctx).step_s >= base * (1 - 2e-3)
    assert pm.step("decode", seqs, ctx + extra).step_s >= base * (1 - 2e-3)


@pytest.fixture(scope="module")
def h200_phase(h200):
    c, cm = h200
    lay = Layout(attn_dp=8, moe_ep=8)
    kn = resolve_knobs("sglang", DSV3, c, lay, a2a="deepep", tbo=True)
    return PhaseModel(DSV3, c, cm, lay, kn)


@pytest.mark.parametrize(
    "tokens,isl,groups",
    [
        # 16,384 at ISL 4,000: four prompts and a 384-token chunk (keys (4000 + 384) // 2)
        (16384, 4000, ((4, 4000, 4000), (1, 384, 2192))),
        (16384, 4096, ((4, 4096, 4096),)),
        (1000, 4000, ((1, 1000, 2500),)),
    ],
)
def test_prefill_budget_is_not_rounded_up(tokens, isl, groups):
    mb = prefill_batch(tokens, isl)
    assert mb.groups == groups and mb.tokens == tokens


def test_prefill_step_prices_the_budget(h200):
    """The step's tokens per second count the budget's tokens, and at ISL 4,000 the step of
    16,384 tokens prices fewer tokens' work than five whole prompts (20,000)."""
    c, cm = h200
    lay = Layout(attn_dp=8, moe_ep=8)
    kn = resolve_knobs("sglang", DSV3, c, lay, a2a="deepep", tbo=True)
    pm = PhaseModel(DSV3, c, cm, lay, kn)
    r = pm.step("prefill", 16384, 4000)
    assert r.tokens_per_s_per_gpu == pytest.approx(16384 / r.step_s, rel=1e-12)
    five = pm.step("prefill", 20000, 4000)
    assert r.step_s < five.step_s
    # the TBO halves cut at the balanced boundary: 8,000 and 8,384 tokens
    assert extend_cut([4000] * 4 + [384]) == 8000


def test_mtp_verify_splits_by_sequence(h200):
    """MTP's verify batch (N + 1 tokens per sequence) splits by sequences, bs // 2: one
    sequence per rank runs as one batch, two are split one and one."""
    c, cm = h200
    lay = Layout(attn_dp=8, moe_ep=8)
    kn = resolve_knobs("sglang", DSV3, c, lay, a2a="deepep", tbo=True, mtp=1, mtp_accept=0.7)
    it = IterationModel(DSV3, c, cm, lay, knobs=kn)
    assert "overlap" not in it.breakdown(Batch(8, 2000, ()))
    assert "overlap" in it.breakdown(Batch(16, 2000, ()))
    assert tbo_halves(Batch(2, 900, ()), per_seq=2) is None
    assert tbo_halves(Batch(6, 900, ()), per_seq=2) == (Batch(2, 900, ()), Batch(4, 900, ()))
