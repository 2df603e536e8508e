"""``serve-sim --pd``: the P/D deployment grammar (round trip, one-line errors) and a given
deployment simulated by the P/D simulator, from text and from a P/D plan.json alike."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_run import run_main
from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.planners.plan import Plan
from moeplan.serve.deployment import AFDLayout, PDLayout, parse_layout, parse_pd, pd_from_dict
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.specs import load_cluster, load_model

BASE = [
    "serve-sim",
    "--model",
    "qwen3-30b-a3b",
    "--cluster",
    "h100-sxm-8",
    "--isl",
    "1024",
    "--osl",
    "32",
    "--requests",
    "60",
    "--cost-engine",
    "none",
    "--json",
]


def _run(capsys, *args: str) -> tuple[int, str, str]:
    return run_main(capsys, *args)


@st.composite
def layouts(draw) -> Layout:
    tp, dp = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 4]))
    mtp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if (tp * dp) % d == 0]))
    pp = draw(st.sampled_from([1, 2, 3]))
    mb = draw(st.sampled_from([0, pp, 2 * pp])) if pp > 1 else 0
    ep = tp * dp // mtp
    return Layout(
        attn_tp=tp,
        attn_dp=dp,
        moe_tp=mtp,
        moe_ep=ep,
        pp=pp,
        micro_batches=mb,
        redundant_experts=draw(st.sampled_from([0, 32])) if ep > 1 else 0,
        fused=draw(st.booleans()) if min(mtp, ep) > 1 else False,
    )


@given(layouts(), layouts(), st.integers(1, 9), st.integers(1, 9))
def test_grammar_round_trips(pre: Layout, dec: Layout, x: int, y: int) -> None:
    """Every layout written in the grammar parses back to itself, as does the P/D pair."""
    pd = PDLayout(prefill=pre, decode=dec, x=x, y=y)
    assert parse_layout(pre.label) == pre
    assert parse_pd(pd.label) == pd
    assert parse_pd(f"{x}*{pre.label}:{y}*{dec.label}") == pd
    assert pd_from_dict(json.loads(json.dumps(pd.to_dict()))) == pd


def test_grammar_examples() -> None:
    pd = parse_pd("4*attn-dp8.moe-ep8:1*attn-tp2.attn-dp16.moe-ep32.moe-r32")
    assert (pd.x, pd.y, pd.gpus) == (4, 1, 4 * 8 + 32)
    assert pd.prefill == Layout(attn_dp=8, moe_ep=8)
    assert pd.decode == Layout(attn_tp=2, attn_dp=16, moe_ep=32, redundant_experts=32)
    assert parse_pd("3*attn-tp8.moe-tp8:2*ag4.eg12").decode == AFDLayout(ag=4, eg=12)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("4*attn-dp8.moe-ep8", "must be X\\*LAYOUT:Y\\*LAYOUT"),
        ("0*attn-tp2.moe-tp2:1*attn-tp2.moe-tp2", "positive integer"),
        ("1*attn-tp2.moe-ep4:1*attn-tp2.moe-tp2", "moe_tp\\*moe_ep"),
        ("1*attn-tp2.bogus3:1*attn-tp2.moe-tp2", "'bogus3' is not in"),
        ("1*ag2.eg2:1*attn-tp2.moe-tp2", "must be a colocated layout"),
        ("1*attn-tp2.attn-tp2:1*attn-tp2.moe-tp2", "given twice"),
        ("1*attn-tp2.moe-tp2:1*ag2", "exactly agN.egN"),
    ],
)
def test_bad_deployment_text_is_one_line(text: str, match: str) -> None:
    with pytest.raises(MoeplanError, match=match):
        parse_pd(text)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--pd", "1*attn-tp2.moe-ep4:1*attn-tp2.moe-tp2"], "moe_tp\\*moe_ep"),
        (
            ["--pd", "1*attn-tp2.moe-tp2:1*attn-tp2.moe-tp2", "--attn-tp", "2"],
            "--pd and --attn-tp are exclusive",
        ),
        (["--pd", "1*attn-tp2.moe-tp2:1*attn-tp2.moe-tp2", "--concurrency", "4"], "--concurrency"),
        (["--pd", "8*attn-tp8.moe-tp8:8*attn-tp8.moe-tp8"], "needs 128 GPUs; the cluster has 8"),
    ],
)
def test_cli_bad_pd_exits_2_with_one_line(capsys, extra: list[str], match: str) -> None:
    code, out, err = _run(capsys, *BASE, *extra)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and pytest.importorskip("re").search(match, lines[0]), err


def test_given_deployment_from_text_equals_its_plan_json(capsys, tmp_path) -> None:
    """Two entries, one simulation: the text and a P/D plan.json of the same deployment give
    the same run; latency is bounded below by one prompt's prefill step (TTFT) and one
    decode step of one sequence (TPOT) on the pools' layouts (the iteration model)."""
    pd = parse_pd("1*attn-tp2.moe-tp2:1*attn-tp4.moe-tp4")
    plan = Plan(
        family="strategy",
        model="qwen3-30b-a3b",
        cluster="h100-sxm-8",
        layout={"world_size": 2, "attn": {"tp": 2, "dp": 1}, "moe": {"tp": 2, "ep": 1}, "pp": 1},
        details={"disaggregation": pd.to_dict()},
    )
    path = tmp_path / "pd.json"
    path.write_text(plan.to_json(), encoding="utf-8")
    code, out, err = _run(
        capsys, *BASE, "--pd", "1*attn-tp2.moe-tp2:1*attn-tp4.moe-tp4", "--rate", "2"
    )
    assert code == 0, err
    a = json.loads(out)
    code, out, err = _run(capsys, *BASE, "--pd", str(path), "--rate", "2")
    assert code == 0, err
    b = json.loads(out)
    assert a["metrics"] == b["metrics"] and a["pd"] == b["pd"] == pd.label
    assert a["gpus"] == 6 and a["layout"]["kind"] == "pd"
    md, cl = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm-8")
    cm = cost_model_for(cl)
    prefill = IterationModel(md, cl, cm, pd.prefill)(Batch(0, 0, ((1024, 1024),)))
    decode = IterationModel(md, cl, cm, pd.decode)(Batch(1, 1024, ()))
    m = a["metrics"]
    assert m["ttft_p50_s"] >= prefill * (1 - 1e-9)
    assert m["tpot_p50_s"] >= decode * (1 - 1e-9)


def test_cli_pd_refuses_one_engine_knobs(capsys) -> None:
    code, out, err = _run(capsys, *BASE, "--pd", "1*attn-tp2.moe-tp2:1*attn-tp2.moe-tp2", "--tbo")
    assert code == 2 and out == "" and "--tbo/--no-tbo does not apply to --pd" in err


def test_pd_pools_run_deepep_with_the_better_two_batch_overlap() -> None:
    """A DeepSeek-V3 EP32 pool on 4x8 H100 with SGLang's kernels: priced with the fused MoE,
    DeepEP (where it can run), and DeepEP with two-batch overlap, whichever pool has more
    capacity (brute force over the three)."""
    from moeplan.kernel_tables import engine_cost_model
    from moeplan.search.disagg.pools import (
        Context,
        _decode_pool,
        _prefill_pool,
        decode_pool,
        pool_fractions,
        pool_knobs,
        prefill_pool,
    )
    from moeplan.serve.metrics import SLO
    from moeplan.serve.workload.arrivals import LengthDist, ServeWorkload

    md, cl = load_model("deepseek-v3"), load_cluster("h100-sxm-8", 4)
    w = ServeWorkload(
        num_requests=10, rate=1.0, isl=LengthDist(mean=2000), osl=LengthDist(mean=100)
    )
    c = Context(
        model=md,
        cluster=cl,
        cost=engine_cost_model(cl, engine="sglang"),
        workload=w,
        slo=SLO(ttft_s=2.0, tpot_s=0.1),
    )
    lay = Layout(attn_dp=32, moe_ep=32)
    knobs = pool_knobs(c, lay)
    assert [(k.a2a, k.tbo) for k in knobs] == [("nccl", 0), ("deepep", 0), ("deepep", 1)]
    for best, one in ((prefill_pool, _prefill_pool), (decode_pool, _decode_pool)):
        kns = [replace(k, mem_fraction=f) for k in knobs for f in pool_fractions(c)]
        rates = [p.rate for k in kns if (p := one(c, lay, k)) is not None]
        pool = best(c, lay)
        assert pool is not None and pool.rate == max(rates) and "DeepEP" in pool.note
