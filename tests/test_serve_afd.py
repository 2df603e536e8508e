"""Attention–FFN disaggregated decode on FinDEP's schedule: Algorithm 1 on decode
shapes against brute force and PPPipe, the serving evaluator against the schedule, and the
families' place in ``moeplan plan``'s ranking."""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest

from moeplan.cost import CostModel, cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners.dep import brute_force, evaluate, pppipe, solve
from moeplan.planners.dep.decode import decode_problem
from moeplan.planners.dep.schedule import DepConfig
from moeplan.planners.plan import Plan
from moeplan.planners.rank import PlanResult
from moeplan.search.disagg.rank import search_pools
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.serve.deployment import AFDLayout
from moeplan.serve.iteration.model import Batch
from moeplan.serve.pools.afd import AFDIteration, bucket_up, coarse_ctx
from moeplan.specs import Workload, load_cluster, load_model

# (model, layers kept, cluster, nodes, ag, eg): shared experts (DeepSeek-V2, FinDEP's α-β
# profile), none (Qwen3), MLA on a datasheet roofline, inter-node A2E.
CASES = [
    ("deepseek-v2", 8, "findep-a", None, 3, 5),
    ("qwen3-30b-a3b", 12, "h100-sxm-8", 2, 4, 4),
    ("deepseek-v3", 6, "h200-sxm-8", 2, 2, 10),
]
SHAPES = [(1, 512), (6, 4096), (16, 1024), (40, 2048)]


def _problem(case, batch, ctx):
    name, layers, cl, nodes, ag, eg = case
    m = load_model(name).with_layers(layers)
    c = load_cluster(cl, nodes)
    return decode_problem(m, c, cost_model_for(c, None), ag=ag, eg=eg, batch=batch, ctx=ctx)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_algorithm1_within_one_percent_of_brute_force_and_above_pppipe(case):
    """On a grid of decode shapes, Algorithm 1's pick is within 1 % of the brute-force best
    over (ma, r1, r2, order) and never below the best PPPipe."""
    for batch, ctx in SHAPES:
        p = _problem(case, batch, ctx)
        alg, bf, pp = solve(p), brute_force(p), pppipe(p)
        assert alg.throughput >= 0.99 * bf.throughput, (batch, ctx, alg.config, bf.config)
        assert alg.throughput >= pp.throughput * (1 - 1e-9), (batch, ctx)
        assert alg.config.r1 * alg.config.ma <= batch


def test_decode_durations_are_one_token_per_sequence():
    """t_a is one attention layer of ma one-token queries over ctx keys plus the router;
    me = ma ag top_k / (r2 E)."""
    m = load_model("qwen3-30b-a3b").with_layers(4)
    c = load_cluster("h100-sxm-8", 2)
    cm = CostModel(c)
    p = decode_problem(m, c, cm, ag=4, eg=4, batch=32, ctx=3000)
    t = p.times(8, 2)
    assert t.attn == pytest.approx(cm.attention_layer(m, 8, 1, 3000) + cm.router(m, 8))
    me = 8 * 4 * m.top_k / (2 * m.num_experts)
    local = math.ceil(m.num_experts / 4)
    assert t.expert == pytest.approx(cm.expert_ffn(m, me, local))
    assert t.a2e == pytest.approx(cm.a2e(me * local * m.hidden_bytes, 4, 4))
    assert p.tokens(8, 4) == 8 * 4 * 4 and p.max_r1(8) == 4


def test_step_time_is_the_schedule_of_the_pick():
    """An AFD decode step = the makespan of Algorithm 1's pick on ceil(b/ag) sequences per
    AG GPU (padded to cover them) + the lm-head; a repeated shape hits the memo."""
    m = load_model("deepseek-v2").with_layers(8)
    c = load_cluster("findep-a")
    cm = cost_model_for(c, None)
    ev = AFDIteration(m, c, cm, AFDLayout(ag=3, eg=5))
    for seqs, ctx in ((1, 256), (7, 1024), (50, 2048)):
        b = bucket_up(-(-seqs // 3))
        pick = solve(decode_problem(m, c, cm, ag=3, eg=5, batch=b, ctx=coarse_ctx(ctx)))
        k = pick.config
        cfg = DepConfig(ma=math.ceil(b / k.r1), r1=k.r1, r2=k.r2, order=k.order)
        span = evaluate(decode_problem(m, c, cm, ag=3, eg=5, batch=b, ctx=ctx), cfg)
        want = span + cm.gemm(b, m.vocab_size, m.hidden_size)
        assert ev(Batch(seqs, ctx, ())) == pytest.approx(want, rel=1e-12)
        n = ev.cache_size
        ev(Batch(seqs, ctx, ()))
        assert ev.cache_size == n
    one_token_chunks = Batch(2, 1000, ((1, 1000), (1, 1000)))
    assert ev(one_token_chunks) == ev(Batch(4, 1000, ()))
    with pytest.raises(MoeplanError, match="decode steps only"):
        ev(Batch(0, 0, ((64, 64),)))


def test_expert_weights_that_do_not_fit_are_refused():
    m = load_model("deepseek-v3")
    c = load_cluster("h100-sxm-8", 2)
    with pytest.raises(MoeplanError, match="does not fit the EG"):
        AFDIteration(m, c, CostModel(c), AFDLayout(ag=8, eg=4))


def test_pd_is_ranked_and_afd_is_a_research_answer_with_its_plan():
    """P/D comes back served; AFD, which no engine launches, is not searched and says which
    rule (``not_served``); its own search and plan (moeplan's runtime runs it) round-trip."""
    from moeplan.search.disagg.rank import POOL_PLANS, disagg_setup
    from moeplan.search.disagg.search import search_disaggregated

    m = load_model("qwen3-30b-a3b")
    c = replace(load_cluster("h100-sxm-8"), gpus_per_node=4)  # a small space: quick
    result = PlanResult(
        model=m,
        cluster=c,
        workload=Workload(phase="both", batch=8, isl=1024, osl=128),
        candidates=(SimpleNamespace(family="strategy"), SimpleNamespace(family="dep")),  # type: ignore[arg-type]
        skipped={},
        explanation=[],
    )
    w = ServeWorkload(
        num_requests=100, rate=1.0, isl=LengthDist(mean=1024), osl=LengthDist(mean=32)
    )
    slo = SLO(ttft_s=1.0, tpot_s=0.05)
    served, why, _, _ = search_pools(result, CostModel(c), w, slo, rate_given=False)
    assert set(why) == {"afd"} and "launches no afd deployment" in why["afd"]
    assert {s.entry.family for s in served} == {"pd"}
    ctx, _, _ = disagg_setup(result, CostModel(c), w, slo)
    assert ctx is not None
    done, _ = search_disaggregated(ctx, ["afd"], incumbent=0.0, requests=100)
    afd_served = [k for k in done if k.family == "afd"]
    assert afd_served
    afd = POOL_PLANS["afd"](ctx, afd_served[0].candidate(ctx))
    for plan in [s.entry.plan for s in served] + [afd]:
        assert Plan.from_json(plan.to_json()).family == plan.family
    for s in served:
        summ = s.summary()
        assert summ["gpus"] <= c.num_gpus and summ["metrics"]["output_tokens_per_s_per_gpu"] > 0
    assert afd.family == "dep" and afd.details["seq_len"] == 1
    assert afd.details["r2"] <= afd.details["ma"]  # the runtime's DEP check (r2 <= ma * seq)
    closed = ServeWorkload(num_requests=50, rate=None, concurrency=8)
    none, why, _, _ = search_pools(result, CostModel(c), closed, SLO())
    assert none == [] and set(why) == {"pd", "afd"}


def _afd_plan() -> Plan:
    """The exported AFD plan.json of qwen3-30b-a3b on two H100 nodes (decode on <= 4 GPUs)."""
    from moeplan.search.disagg.pools import Context, candidates
    from moeplan.search.disagg.rank import afd_plan

    m, c = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm-8", 2)
    w = ServeWorkload(
        num_requests=50, rate=1.0, isl=LengthDist(mean=1024), osl=LengthDist(mean=128)
    )
    ctx = Context(model=m, cluster=c, cost=CostModel(c), workload=w, slo=SLO(ttft_s=1, tpot_s=0.05))
    k = next(k for k in candidates(ctx, "afd") if k.layout.decode.gpus <= 4)
    return Plan.from_json(afd_plan(k, m.name, c.name, 8, 1088).to_json())


@pytest.mark.slow
def test_afd_plan_runs_on_the_runtime_dep_engine():
    """The exported AFD plan.json (decode-shaped: one token per sequence, the pick's ma, r1,
    r2 and order) runs on the runtime's DEP engine on gloo and matches the single-process
    reference. Attention there has no KV cache: the schedule is a decode step's, the
    attention is over the new token only (docs/benchmarks/disaggregation.md)."""
    plan, reports = _spawned()
    world = plan.world_size
    assert len(reports) >= world and all(r["ok"] for r in reports), reports
    runs = [r["result"]["afd"] for r in reports[:world]]
    assert all(r is not None and "error" not in r for r in runs), runs
    roles = [r["role"] for r in runs]
    assert (
        roles.count("attention") == plan.layout["ag"] and roles.count("expert") == plan.layout["eg"]
    )
    errs = [r["max_abs_err"] for r in runs if r["role"] == "attention"]
    assert max(errs) <= 1e-5


#: the pools of a P/D plan's ``details.disaggregation`` (``PDLayout.to_dict``'s keys)
POOLS = {
    "prefill": {"attn_tp": 1, "attn_dp": 1, "moe_tp": 1, "moe_ep": 1, "instances": 4},
    "decode": {"attn_tp": 1, "attn_dp": 4, "moe_tp": 1, "moe_ep": 4, "instances": 1},
}


def test_serve_sim_refuses_disaggregated_plans(tmp_path, capsys):
    """serve-sim simulates one engine: a PD or AFD plan.json is refused in one line (exit 2)
    instead of being served as its decode instance alone."""
    from moeplan.cli import main

    for kind, plan in (
        (
            "pd",
            Plan(
                family="strategy",
                model="qwen3-30b-a3b",
                cluster="h100-sxm-8",
                layout={
                    "world_size": 8,
                    "attn": {"tp": 1, "dp": 8},
                    "moe": {"tp": 1, "ep": 8},
                    "pp": 1,
                },
                details={"disaggregation": {"kind": "pd", **POOLS}},
            ),
        ),
        (
            "afd",
            Plan(
                family="dep",
                model="qwen3-30b-a3b",
                cluster="h100-sxm-8",
                layout={"world_size": 4, "ag": 2, "eg": 2},
                details={"disaggregation": {"kind": "afd", **POOLS}},
            ),
        ),
    ):
        path = tmp_path / f"{kind}.json"
        path.write_text(plan.to_json())
        with pytest.raises(SystemExit) as ex:
            main(["serve-sim", "--plan", str(path), "--rate", "2"])
        err = capsys.readouterr().err
        assert ex.value.code == 2 and f"disaggregation ({kind})" in err
        assert len(err.strip().splitlines()) == 1


DECODE_CASES = (  # (ag, eg, r1, ma, r2, order): world ag + eg
    (1, 1, 2, 2, 1, "ASAS"),
    (2, 1, 2, 2, 2, "AASS"),
)


def _decode_step(rank: int, case: tuple) -> float | None:
    """One rank of a DEP decode step on gloo: AG ranks return their max abs error against
    the single-process reference, EG ranks None."""
    from moeplan.runtime.config import MoEConfig
    from moeplan.runtime.engines.dep import run_dep_expert
    from moeplan.runtime.engines.dep_decode import prefill_cache, reference_decode, run_dep_decode
    from moeplan.runtime.engines.dep_params import DepParams
    from moeplan.runtime.layers.model import init_model, make_inputs
    from moeplan.runtime.timeline import Timeline

    ag, eg, r1, ma, r2, order = case
    cfg = MoEConfig(num_layers=3, shared_intermediate_size=32)  # DEP: MoE layers only
    layers = init_model(cfg, seed=0)
    p = DepParams(ag=ag, eg=eg, r1=r1, r2=r2, ma=ma, order=order)
    tl = Timeline(rank)
    if rank >= ag:
        run_dep_expert(layers, cfg, p, rank, tl)
        return None
    n = r1 * ma
    prompt = make_inputs(cfg, ag * n, 9, seed=1)  # prompts of 9 tokens (their KV: the cache)
    new = make_inputs(cfg, ag * n, 1, seed=2)
    rows = slice(rank * n, (rank + 1) * n)
    cache = prefill_cache(prompt[rows], layers, cfg)
    out = run_dep_decode(new[rows], cache, layers, cfg, p, rank, tl)
    return float((out - reference_decode(prompt, new, layers, cfg)[rows]).abs().max())


def _rank(rank: int, world: int, plan: Plan, opts) -> dict:
    """One rank of this file's one spawn: each decode case on its first ag + eg ranks (DEP is
    point-to-point between explicit ranks; the others wait at the barrier), then the AFD plan
    on its ranks (:func:`moeplan.runtime.runner.run_plans`)."""
    import torch.distributed as dist

    from moeplan.runtime.runner import run_plans
    from moeplan.runtime.spawn import init_distributed

    init_distributed(rank, world, timeout_s=60)
    decode = []
    for case in DECODE_CASES:
        decode.append(_decode_step(rank, case) if rank < case[0] + case[1] else None)
        dist.barrier()  # one case's messages never meet the next one's
    return {"decode": decode, "afd": run_plans(rank, world, [plan], [opts])[0]}


@functools.cache
def _spawned() -> tuple[Plan, tuple[dict, ...]]:
    """One spawn for every runtime check of this file (was one per check: 2 + 3 + 4
    processes, each paying the interpreter and torch start); cached even when it fails."""
    from moeplan.runtime.runner import RunOptions
    from moeplan.runtime.spawn import spawn_world

    plan = _afd_plan()
    world = max(plan.world_size, *(c[0] + c[1] for c in DECODE_CASES))
    opts = RunOptions(tokens=8, seed=0, timeout_s=60)
    return plan, tuple(spawn_world(_rank, world, (plan, opts), deadline_s=240))


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", DECODE_CASES, ids=[f"ag{c[0]}eg{c[1]}r1{c[2]}r2{c[4]}{c[5]}" for c in DECODE_CASES]
)
def test_dep_decode_step_matches_the_reference(case):
    """A decode step through the DEP engine (KV-cached attention on the AG, r1 micro-batches,
    r2 chunks, ASAS/AASS, experts on the EG) equals the last position of the single-process
    forward of prompt + token (fp32, <= 1e-5)."""
    _, reports = _spawned()
    assert all(r["ok"] for r in reports), reports
    i = DECODE_CASES.index(case)
    errs = [r["result"]["decode"][i] for r in reports[: case[0]]]
    assert max(errs) <= 1e-5
