"""The papers' own serving comparisons, simulated on ``moeplan.serve``, beside the
numbers the papers publish; ``docs/benchmarks/papers.md`` records them and explains each setup.

- MixServe §IV-B (paper 003): Table II baselines, MixServe's pick on our cost model and its
  TP-EP hybrid (unfused, and scaled by the strategy model's fused/unfused ratio: the serving
  iteration model prices collectives one after another) on H20 and 910B, 2/4/8 req/s, at most
  16 running requests, ShareGPT-like lengths within 4096 tokens, vLLM scheduler.
- Sem-MoE §4.4 (paper 002): LAR and load imbalance of contiguous / EPLB / transition / Sem-MoE
  placements (``place`` on a synthetic trace of the model's shape) priced in the iteration
  model; the largest rate meeting 5x the lightest-load TTFT or E2E (p90) and its tokens/s.
- SMIDT §5.2 (paper 001): its plan and baselines (uniform, time-balanced, no PP) served as
  ServeLayouts (``search.ranking.rank.pipeline_entries``) on a closed loop (offline task): tokens/s.

``run()``: one row per published claim; ``value`` = simulated ratio, ``reference`` = the
paper's ratio (from its text, not measured here), ``ratio`` = simulated / paper.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter, namedtuple
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

from moeplan.commands.pipeline import read_routing_profile
from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners import strategy as st
from moeplan.planners.layout import Layout
from moeplan.planners.pipeline import plan_pipeline
from moeplan.planners.placement import PlaceConfig, cost_evaluator, place
from moeplan.planners.strategy.space import mixserve_default, named_baselines
from moeplan.search import max_rate_meeting_slo
from moeplan.search.colocated.evaluate import run_workload
from moeplan.search.ranking.rank import pipeline_entries
from moeplan.serve import (
    SLO,
    Batch,
    EngineConfig,
    IterationModel,
    LengthDist,
    ServeWorkload,
    engine_config,
)
from moeplan.serve.metrics import Probe, ServeMetrics, run_stable
from moeplan.specs import Workload, load_cluster, load_model
from moeplan.traces.synthetic import SynthConfig, synthesize

# ---- MixServe §IV-B ----------------------------------------------------------------------
RATES = (2.0, 4.0, 8.0)  # req/s, §IV-B
MAX_BATCH = 16  # §IV-B "maximum batch size": running requests
ISL = LengthDist.parse("lognormal:300:1.0:3072")  # ShareGPT-like; isl + osl <= 4096 (§IV-B)
OSL = LengthDist.parse("lognormal:200:0.8:1024")
MIXSERVE_CASES = [
    (c, m) for c in ("mixserve-h20", "mixserve-910b") for m in ("deepseek-v3", "qwen3-235b-a22b")
]
TUTEL_TP4 = Layout(attn_tp=4, attn_dp=4, moe_tp=4, moe_ep=4)  # Table II, H20 column only
# §IV-B text: (cluster, model, baseline) -> (TTFT x, ITL x, throughput x) of MixServe over it,
# each a (low, high) range; named baseline ``deepseek-v3`` is Table II's vLLM TP4 + DP, EP row
R910, ITL_DS, ITL_QW = (1.32, 1.93), 227.33 / 160.06, 134.27 / 81.1
MIXSERVE_PAPER = {
    ("mixserve-910b", "deepseek-v3", "vllm-tp-pp"): ((2.67,) * 2, (ITL_DS,) * 2, (1.22,) * 2),
    ("mixserve-910b", "deepseek-v3", "vllm-dp-ep"): ((1.70,) * 2, None, None),
    ("mixserve-910b", "qwen3-235b-a22b", "vllm-tp-pp"): ((3.8,) * 2, (ITL_QW,) * 2, (1.322,) * 2),
    ("mixserve-910b", "qwen3-235b-a22b", "vllm-dp-ep"): (R910, None, None),
    ("mixserve-910b", "qwen3-235b-a22b", "deepseek-v3"): (R910, None, None),
    ("mixserve-h20", "deepseek-v3", "vllm-tp-pp"): (None, None, (545.23 / 362.78,) * 2),
    ("mixserve-h20", "qwen3-235b-a22b", "vllm-tp-pp"): (None, None, (625.45 / 435.82,) * 2),
}
MIXSERVE_RANGES = {
    "mixserve-h20": ((1.08, 1.23), (1.03, 1.16)),  # TTFT x, ITL x, all baselines
    "mixserve-910b": ((1.32, 3.80), (1.42, 1.66)),  # ITL: vs TP+PP only (vs DP+EP not stated)
}


def _layout(s: Layout) -> Layout:
    return Layout(attn_tp=s.attn_tp, attn_dp=s.attn_dp, moe_tp=s.moe_tp, moe_ep=s.moe_ep, pp=s.pp)


def fused_breakdown(model, cluster, cost) -> dict[str, float]:
    """The strategy model's fused hybrid over the same degrees unfused, per phase (Eq. 6 with
    Algs. 1-2 vs the sequential sum; this also counts Alg. 2's 1/TP-sized inter-node
    dispatch), and the prefill ratio of the overlap alone (the fused variant's own
    sequential sum vs its overlapped communication)."""
    work = Workload(phase="both", batch=MAX_BATCH, isl=ISL.mean, osl=OSL.mean, rate=RATES[1])
    ev = st.StrategyEvaluator(model, cluster, work, cost)
    hyb = mixserve_default(cluster.num_nodes, cluster.gpus_per_node)
    f, p = ev(hyb), ev(replace(hyb, fused=False))
    assert f is not None and p is not None
    fp = f.prefill
    overlap = (fp.compute_s + fp.comm_s) / (fp.compute_s + fp.comm_unfused_s)
    decode = f.decode.total_s / p.decode.total_s
    return dict(prefill=fp.total_s / p.prefill.total_s, decode=decode, overlap_only=overlap)


def mixserve_arms(model, cluster, cost) -> dict[str, tuple[Layout, float, float]]:
    """Arm -> (layout, TTFT factor, ITL factor); factors are 1 except for the fused estimate."""
    n, g = cluster.num_nodes, cluster.gpus_per_node
    arms = {
        k: (_layout(s), 1.0, 1.0)
        for k, s in named_baselines(n, g).items()
        if k != "tutel-tp-ep" or cluster.gpu.name.startswith("h20")
    }
    if cluster.gpu.name.startswith("h20"):
        arms["tutel-tp4-ep4"] = (_layout(TUTEL_TP4), 1.0, 1.0)
    work = Workload(phase="both", batch=MAX_BATCH, isl=ISL.mean, osl=OSL.mean, rate=RATES[1])
    pick = st.analyze(model, cluster, work, cost).best
    assert pick is not None
    arms["mixserve-pick"] = (_layout(pick.strategy), 1.0, 1.0)
    hybrid = _layout(mixserve_default(n, g))
    arms["mixserve-hybrid"] = (hybrid, 1.0, 1.0)
    f = fused_breakdown(model, cluster, cost)
    arms["mixserve-hybrid-fused-est"] = (hybrid, f["prefill"], f["decode"])
    return arms


# One MixServe arm at one rate: mean TTFT from arrival (open loop, queueing included; NaN for
# the fused estimate) and after admission, p50 ITL, total tokens/s.
MsRec = namedtuple(
    "MsRec", "cluster model arm layout rate ttft_s ttft_admitted_s itl_s tokens_per_s"
)


def mixserve_records(requests: int = 400, cases=MIXSERVE_CASES) -> list[MsRec]:
    """Every (cluster, model, arm, rate), simulated (the fused estimate scaled as documented)."""
    out = []
    for cname, mname in cases:
        cluster, model = load_cluster(cname), load_model(mname)
        cost = cost_model_for(cluster)
        for arm, (lay, f_ttft, f_itl) in mixserve_arms(model, cluster, cost).items():
            cfg = engine_config("vllm", model, cluster, lay, max_running=MAX_BATCH)
            it = IterationModel(model, cluster, cost, lay)
            for rate in RATES:
                w = ServeWorkload(num_requests=requests, rate=rate, seed=0, isl=ISL, osl=OSL)
                m = run_workload(cfg, w, it, lay.gpus, SLO())[1]
                admitted = (m.mean_ttft_s - m.mean_wait_s) * f_ttft
                ttft = m.mean_ttft_s if f_ttft == 1.0 else float("nan")
                itl, tps = m.itl_p50_s * f_itl, m.total_tokens_per_s / f_itl
                out.append(MsRec(cname, mname, arm, lay.label, rate, ttft, admitted, itl, tps))
    return out


def mixserve_speedups(recs: list[MsRec], arm: str) -> dict[tuple[str, str, str], tuple]:
    """(cluster, model, baseline) -> (TTFT x, ITL x, throughput x) of ``arm`` at 4 req/s
    (TTFT after admission; > 1 = the arm is better)."""
    at = {(r.cluster, r.model, r.arm): r for r in recs if r.rate == RATES[1]}
    out = {}
    for (c, m, a), b in at.items():
        x = at.get((c, m, arm))
        if x is not None and not a.startswith("mixserve"):
            ttft, itl = b.ttft_admitted_s / x.ttft_admitted_s, b.itl_s / x.itl_s
            out[(c, m, a)] = (ttft, itl, x.tokens_per_s / b.tokens_per_s)
    return out


# ---- Sem-MoE §4.4 --------------------------------------------------------------------------
SEMMOE_MODELS = ("deepseek-v2-lite", "qwen3-30b-a3b")
SEMMOE_LAYOUT = Layout(attn_dp=8, moe_ep=8)  # attention-DP scenario, EP8 (§4.4)
SEMMOE_ISL, SEMMOE_OSL = 512, 128  # "input and output length fixed" (§4.3; values not given)
LIGHT_RATE = 10.0  # req/s, the paper's lightest load (§4.3)
SLO_FACTOR = 5.0  # SLO = 5x the latency at the lightest load (§4.3)
# §4.4: Sem-MoE throughput gain over SGLang under (TTFT SLO, E2E SLO); §4.5 LAR gain
SEMMOE_PAPER = {"deepseek-v2-lite": (1.31, 3.21, 0.37), "qwen3-30b-a3b": (1.98, 1.11, 0.43)}


@lru_cache(maxsize=2)
def _trace(model, requests: int):
    cfg = SynthConfig(
        num_layers=model.num_moe_layers,
        num_experts=model.num_experts,
        top_k=model.top_k,
        num_requests=requests,
        num_groups=model.num_experts // 4,
    )
    return synthesize(cfg)


def semmoe_placements(model, cost, requests: int = 256, mode: str = "dp"):
    """Method -> (held-out LAR, load imbalance) of the placement planner (attention-``mode``
    data scheduling) on a synthetic trace of the model's shape (validation guard off: the
    planned Sem-MoE placement is kept), plus ``semmoe-lar-only`` (Sem-MoE's LAR with
    contiguous imbalance) and ``paper-lar``: contiguous with LAR raised by the paper's §4.5
    gain (read as points)."""
    res = place(
        _trace(model, requests),
        num_layers=model.num_moe_layers,
        num_experts=model.num_experts,
        hidden_bytes=model.hidden_bytes,
        evaluate=cost_evaluator(cost, model, 8),
        cfg=PlaceConfig(ep=8, mode=mode, guard=False),
    )
    out = {k: (v.metrics["lar"], v.metrics["imbalance"]) for k, v in res.methods.items()}
    lar0, imb0 = out["contiguous"]
    out["semmoe-lar-only"] = (out["semmoe"][0], imb0)  # its locality, SGLang's balance
    out["paper-lar"] = (lar0 + SEMMOE_PAPER[model.name][2], imb0)
    return out


@dataclass(frozen=True)
class _E2E:
    """A run judged by its p90 end-to-end latency (SLO has TTFT/TPOT only)."""

    m: ServeMetrics
    limit_s: float

    def meets(self, slo: SLO) -> bool:  # noqa: ARG002 - same interface as ServeMetrics
        return self.m.e2e_p90_s <= self.limit_s


# One placement under one SLO: LAR, imbalance, the SLO, the largest Poisson rate meeting it,
# total tokens/s there, and communication's share of a 256-sequence decode step.
SemRec = namedtuple(
    "SemRec", "model placement lar imbalance slo slo_s max_rate tokens_per_s comm_share"
)


def semmoe_records(requests: int = 1500, trace_requests: int = 256, models=SEMMOE_MODELS):
    cluster, lay = load_cluster("semmoe-8"), SEMMOE_LAYOUT
    cost = cost_model_for(cluster)
    lens = dict(isl=LengthDist(mean=SEMMOE_ISL), osl=LengthDist(mean=SEMMOE_OSL))
    w = ServeWorkload(num_requests=requests, rate=LIGHT_RATE, seed=0, **lens)
    out = []
    for mname in models:
        model = load_model(mname)
        cfg = engine_config("sglang", model, cluster, lay)

        def sim(rate: float, it: IterationModel, cfg=cfg):
            return run_workload(cfg, w.with_rate(rate), it, lay.gpus, SLO())

        places = semmoe_placements(model, cost, trace_requests)
        lar0, imb0 = places["contiguous"]
        base = IterationModel(model, cluster, cost, lay, imbalance=imb0, lar=lar0)
        light = sim(LIGHT_RATE, base)[1]
        limits = {"ttft": SLO_FACTOR * light.ttft_p90_s, "e2e": SLO_FACTOR * light.e2e_p90_s}
        for name, (lar, imb) in places.items():
            it = IterationModel(model, cluster, cost, lay, imbalance=imb, lar=lar)
            share = _comm_share(it, cfg.max_running)
            for kind, lim in limits.items():
                slo = SLO(ttft_s=lim) if kind == "ttft" else SLO()

                def judge(r: float, it=it, kind=kind, lim=lim, slo=slo) -> Probe:
                    res, m = sim(r, it)  # a growing queue fails too (serve.metrics.run_stable)
                    return Probe(m if kind == "ttft" else _E2E(m, lim), run_stable(res, slo))  # type: ignore[arg-type]

                rate = max_rate_meeting_slo(judge, SLO(ttft_s=lim), hi=4 * LIGHT_RATE, rel_tol=0.02)
                tps = sim(rate, it)[1].total_tokens_per_s
                out.append(SemRec(mname, name, lar, imb, kind, lim, rate, tps, share))
    return out


def _comm_share(it: IterationModel, running: int) -> float:
    bd = it.breakdown(Batch(min(running, 256), SEMMOE_ISL + SEMMOE_OSL // 2, ()))
    return bd["comm"] / bd["period_s"]


SEMMOE_TP_LAYOUT = Layout(attn_tp=8, moe_ep=8)  # attention-TP scenario (§4.4, Table 1)
# Table 1: p99 TTFT (ms) at 1 req/s of (SGLang, MoETuner, Sem-MoE) per input length
SEMMOE_TABLE1 = {
    "deepseek-v2-lite": {
        256: (84.87, 80.96, 75.63),
        512: (98.10, 92.17, 88.69),
        1024: (111.19, 119.76, 100.74),
    },
    "qwen3-30b-a3b": {
        256: (85.72, 87.24, 74.46),
        512: (104.76, 101.86, 83.87),
        1024: (107.73, 107.36, 103.69),
    },
}
TP_ARMS = ("contiguous", "transition", "semmoe")  # SGLang, MoETuner-like, Sem-MoE (Table 1)


# Attention-TP scenario: one placement at one input length, p99 TTFT at 1 req/s (simulated and
# Table 1's).
TpRec = namedtuple("TpRec", "model isl placement lar imbalance ttft_p99_s paper_ttft_p99_s")


def semmoe_tp_records(requests: int = 100, trace_requests: int = 256, models=SEMMOE_MODELS):
    cluster, lay = load_cluster("semmoe-8"), SEMMOE_TP_LAYOUT
    cost = cost_model_for(cluster)
    out = []
    for mname in models:
        model = load_model(mname)
        cfg = engine_config("sglang", model, cluster, lay)
        places = semmoe_placements(model, cost, trace_requests, mode="tp")
        for isl, paper in SEMMOE_TABLE1[mname].items():
            lens = dict(isl=LengthDist(mean=isl), osl=LengthDist(mean=SEMMOE_OSL // 2))
            w = ServeWorkload(num_requests=requests, rate=1.0, seed=0, **lens)
            for name, ttft in zip(TP_ARMS, paper, strict=True):
                lar, imb = places[name]
                it = IterationModel(model, cluster, cost, lay, imbalance=imb, lar=lar)
                m = run_workload(cfg, w, it, lay.gpus, SLO())[1]
                out.append(TpRec(mname, isl, name, lar, imb, m.ttft_p99_s, ttft / 1e3))
    return out


# ---- SMIDT §5.2 ----------------------------------------------------------------------------
SMIDT_BATCH = 128  # sequences in flight (planner batch = closed-loop concurrency)
MMLU, HELLASWAG, DAILYM, PAULG = (
    ("MMLU", 400, 1),
    ("HellaSwag", 200, 1),
    ("DailyM", 1000, 50),
    ("PaulG", 3500, 100),
)  # Table 2: (task, prompt, output) mean lengths
# (cluster, nodes, model, routing profile, tasks)
SMIDT_CASES = [
    ("smidt-a40", 1, "qwen2-57b-a14b", "qwen2-57b-a14b-adak", [MMLU, HELLASWAG, DAILYM, PAULG]),
    ("smidt-a40", 4, "qwen3-235b-a22b", "qwen3-235b-a22b-topp", [MMLU, DAILYM, PAULG]),
    ("smidt-a100", 2, "qwen3-235b-a22b", "qwen3-235b-a22b-topp", [MMLU]),
]
# §5.2: SMIDT / baseline throughput ranges, per testbed and task kind (prefill-only or not)
SMIDT_PAPER = {
    ("smidt-a40", 1, "no_pp", True): (1.78, 3.08),
    ("smidt-a40", 1, "pp", True): (1.17, 1.31),
    ("smidt-a40", 1, "no_pp", False): (1.71, 1.89),
    ("smidt-a40", 1, "pp", False): (1.07, 1.16),
    ("smidt-a40", 4, "all", None): (1.28, 1.62),
    ("smidt-a100", 2, "all", None): (1.18, 1.37),
}


# One arm of one task: its plan's PP degree, served layout, the planner's analytic tokens/s and
# the simulated total tokens/s (closed loop of ``SMIDT_BATCH``).
SmidtRec = namedtuple(
    "SmidtRec", "cluster nodes task prefill_only arm pp layout analytic_tokens_per_s tokens_per_s"
)


def dpmoe_replicas(p) -> list[tuple[Layout, int]]:
    """SMIDT's plan read as ``d`` independent replicas (DPMoE ``d`` = replicated experts, as
    :mod:`moeplan.planners.pipeline.launchable` reads one-stage plans): with the dominant
    attention choice ``(t_a, d_a)`` and a MoE choice ``(t_m, e_m, d_m)``, ``d_m`` replicas of
    attention TP ``t_a`` x DP ``d_a / d_m``, MoE TP ``t_m`` x EP ``e_m``, same PP. One per
    MoE choice with ``d_m > 1`` dividing ``d_a``, most used first (SMIDT mixes ``d`` per
    layer to fit memory; one ``d`` for all layers may not fit)."""
    mods: dict[str, Counter] = {"attn": Counter(), "moe": Counter()}
    for stage in p.stages:
        for ref, c in stage.modules:
            if ref.kind in mods:
                mods[ref.kind][(c.tp, c.ep, c.dpmoe)] += 1
    ta, _, da = mods["attn"].most_common(1)[0][0]
    return [
        (Layout(attn_tp=ta, attn_dp=da // d, moe_tp=t, moe_ep=e, pp=p.pp), d)
        for (t, e, d), _ in mods["moe"].most_common()
        if d > 1 and da % d == 0
    ]


def _served(model, cluster, p, arm: str) -> list[tuple[str, Layout, int, EngineConfig]]:
    """(arm, layout, replicas, engine): the plan as :func:`pipeline_entries` serves it (DPMoE
    counted into the EP span), and for SMIDT also as the first DPMoE reading that fits."""
    fake = SimpleNamespace(detail=SimpleNamespace(plan=p), label=arm, plan=None, launchable_as=None)
    lay = pipeline_entries(fake)[-1].layout  # type: ignore[arg-type]  # the EP-span reading
    try:
        out = [(arm, lay, 1, engine_config("sglang", model, cluster, lay))]
    except MoeplanError:  # its weights leave this layout no KV cache: not servable
        return []
    for rep, n in dpmoe_replicas(p) if arm == "smidt" else []:
        try:
            return [*out, ("smidt-replicas", rep, n, engine_config("sglang", model, cluster, rep))]
        except MoeplanError:  # this replica does not hold the model
            continue
    return out


def smidt_records(requests: int = 256, cases=SMIDT_CASES) -> list[SmidtRec]:
    out = []
    for cname, nodes, mname, prof, tasks in cases:
        cluster = load_cluster(cname).with_nodes(nodes)
        cost, model = cost_model_for(cluster), load_model(mname)
        route = read_routing_profile(prof, model)
        for task, isl, osl in tasks:
            work = Workload(phase="both", batch=SMIDT_BATCH, isl=isl, osl=osl, routing=route)
            res = plan_pipeline(model, cluster, work, cost)
            lens = dict(isl=LengthDist(mean=isl), osl=LengthDist(mean=osl), seed=0)
            for plan_arm, p in {"smidt": res.plan, **res.baselines}.items():
                for arm, lay, n, cfg in _served(model, cluster, p, plan_arm) if p else []:
                    w = ServeWorkload(
                        num_requests=requests // n, rate=None, concurrency=SMIDT_BATCH // n, **lens
                    )
                    it = IterationModel(model, cluster, cost, lay, route)
                    tps = n * run_workload(cfg, w, it, lay.gpus, SLO())[1].total_tokens_per_s
                    label = lay.label + (f" x{n} replicas" if n > 1 else "")
                    rec = (cname, nodes, task, osl <= 1, arm, p.pp, label)
                    out.append(SmidtRec(*rec, p.throughput_tokens_per_s, tps))
    return out


def smidt_speedups(recs: list[SmidtRec], key: str = "tokens_per_s", arm: str = "smidt"):
    """(cluster, nodes, task, baseline) -> ``arm`` / baseline (``key``: simulated or
    analytic)."""
    at = {(r.cluster, r.nodes, r.task, r.arm): getattr(r, key) for r in recs}
    return {
        (c, n, t, a): at[(c, n, t, arm)] / v
        for (c, n, t, a), v in at.items()
        if not a.startswith("smidt") and (c, n, t, arm) in at
    }


# ---- rows and tables -----------------------------------------------------------------------
def _row(name: str, sim: float, paper: float | None, target: str, note: str) -> dict:
    ratio = None if paper is None else sim / paper
    return dict(
        name=name, value=sim, unit="x", reference=paper, ratio=ratio, target=target, note=note
    )


def _agree(sim: float, lo: float, hi: float) -> str:
    """``no`` (other side of 1 than the paper), ``yes`` (within 10 % of its range), else
    ``order`` (same side of 1: the ordering agrees, the size does not)."""
    if (sim > 1) != (lo > 1):
        return "no"
    return "yes" if lo * 0.9 <= sim <= hi * 1.1 else "order"


def mixserve_rows(recs: list[MsRec]) -> list[dict]:
    rows = []
    for arm in ("mixserve-pick", "mixserve-hybrid-fused-est"):
        sp = mixserve_speedups(recs, arm)
        for (c, m, base), paper in MIXSERVE_PAPER.items():
            for i, what in enumerate(("TTFT", "ITL", "throughput")):
                if paper[i] is not None and (c, m, base) in sp:
                    s, name = sp[(c, m, base)][i], f"MixServe {what} x, {arm} vs {base}, {c} {m}"
                    lo, hi = paper[i]
                    rows.append(
                        _row(name, s, (lo + hi) / 2, f"in {lo:.2f}-{hi:.2f}", _agree(s, lo, hi))
                    )
        for c, ranges in MIXSERVE_RANGES.items():
            for i, what in enumerate(("TTFT", "ITL")):
                got = [v[i] for k, v in sp.items() if k[0] == c]
                (lo, hi), name = ranges[i], f"MixServe {what} x, {arm} vs every baseline, {c}"
                note = f"{_agree(min(got), lo, hi)}; max {max(got):.2f} (paper {lo}-{hi})"
                rows.append(_row(name + " (min)", min(got), lo, "> 1 vs every baseline", note))
    return rows


def semmoe_rows(recs: list[SemRec]) -> list[dict]:
    at = {(r.model, r.placement, r.slo): r.tokens_per_s for r in recs}
    rows = []
    for (model, arm, kind), tps in at.items():
        if arm in ("semmoe", "semmoe-lar-only", "paper-lar"):
            paper = SEMMOE_PAPER[model][0 if kind == "ttft" else 1]
            s = tps / at[(model, "contiguous", kind)]
            name = f"Sem-MoE tokens/s at {kind.upper()} SLO x, {arm} vs SGLang, {model}"
            rows.append(_row(name, s, paper, "> 1", _agree(s, paper, paper)))
    return rows


def semmoe_tp_rows(recs: list[TpRec]) -> list[dict]:
    at = {(r.model, r.isl, r.placement): r for r in recs}
    rows = []
    for (model, isl, arm), r in at.items():
        if arm != "contiguous":
            base = at[(model, isl, "contiguous")]
            s, paper = base.ttft_p99_s / r.ttft_p99_s, base.paper_ttft_p99_s / r.paper_ttft_p99_s
            name = f"Sem-MoE attention-TP p99 TTFT x, {arm} vs SGLang, {model}, isl {isl}"
            rows.append(_row(name, s, paper, "> 1", _agree(s, paper, paper)))
    return rows


def smidt_rows(recs: list[SmidtRec]) -> list[dict]:
    rows = []
    ana = smidt_speedups(recs, "analytic_tokens_per_s")
    pre = {(r.cluster, r.nodes, r.task): r.prefill_only for r in recs}
    for arm in ("smidt", "smidt-replicas"):
        for (c, n, task, base), s in smidt_speedups(recs, arm=arm).items():
            kind = "no_pp" if base == "no_pp" else "pp"
            rng = (
                SMIDT_PAPER.get((c, n, kind, pre[(c, n, task)])) or SMIDT_PAPER[(c, n, "all", None)]
            )
            note = f"{_agree(s, *rng)}; planner's analytic ratio {ana[(c, n, task, base)]:.2f}"
            name = f"SMIDT tokens/s x, {arm} vs {base}, {c} x{n} nodes, {task}"
            rows.append(_row(name, s, (rng[0] + rng[1]) / 2, f"in {rng[0]}-{rng[1]}", note))
    at = {(r.cluster, r.nodes, r.task, r.arm): r.tokens_per_s for r in recs}
    for c, n, task in pre:
        if (c, n, task, "no_pp") not in at:  # no PP-free layout is servable there
            continue
        best_pp = max(at.get((c, n, task, a), 0.0) for a in ("uniform", "time_balanced"))
        s, name = best_pp / at[(c, n, task, "no_pp")], f"SMIDT best PP baseline / no PP, {c} x{n}"
        rows.append(_row(f"{name}, {task}", s, None, "> 1 (PP beats no PP)", str(s > 1)))
    return rows


def run() -> list[dict]:
    t0 = time.perf_counter()
    rows = mixserve_rows(mixserve_records()) + semmoe_rows(semmoe_records())
    rows += semmoe_tp_rows(semmoe_tp_records()) + smidt_rows(smidt_records())
    dt = time.perf_counter() - t0
    note = "all three comparisons"
    wall = dict(name="bench_serve_papers wall time", value=dt, unit="s", reference=None)
    return [*rows, dict(**wall, ratio=None, target="<= 300 s", note=note)]


def _is_seconds(field: str) -> bool:
    return field.endswith("_s") and not field.endswith("per_s")


def _fmt(field: str, v: object) -> str:
    """Seconds as ms, other floats to 3 significant digits (thousands grouped), else str."""
    if isinstance(v, float):
        if v != v:
            return "–"
        if _is_seconds(field):
            return f"{v * 1e3:,.1f}"
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return "–" if v is None else str(v)


def print_table(recs: list) -> None:
    """Markdown table of NamedTuple records or row dicts (seconds shown as ms)."""
    fields = list(recs[0]._fields if hasattr(recs[0], "_fields") else recs[0])
    print("\n| " + " | ".join(f[:-2] + "_ms" if _is_seconds(f) else f for f in fields) + " |")
    print("|---" * len(fields) + "|")
    for r in recs:
        vals = r if hasattr(r, "_fields") else r.values()
        print("| " + " | ".join(_fmt(f, v) for f, v in zip(fields, vals, strict=True)) + " |")


def record(path: Path, tables: dict[str, list], fused: dict, rows: list[dict]) -> None:
    """The run's claim rows, every table's records and the fused/unfused factors, with the
    command and the date: the record ``docs/benchmarks/papers.md`` is checked against."""
    doc = {
        "command": "python bench/bench_serve_papers.py --record",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "kind": "bench",
        "load_average": round(os.getloadavg()[0], 2),
        "rows": rows,
        "tables": {k: [r._asdict() for r in recs] for k, recs in tables.items()},
        "fused_over_unfused": fused,
    }
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")


if __name__ == "__main__":
    t0 = time.perf_counter()
    ms, sem, tp, sm = mixserve_records(), semmoe_records(), semmoe_tp_records(), smidt_records()
    for recs in (ms, sem, tp, sm):
        print_table(recs)
    fused = {}
    for c, m in MIXSERVE_CASES:
        cl = load_cluster(c)
        fused[f"{c} {m}"] = fused_breakdown(load_model(m), cl, cost_model_for(cl))
        print(f"\n{c} {m} fused / unfused: {fused[f'{c} {m}']}")
    rows = mixserve_rows(ms) + semmoe_rows(sem) + semmoe_tp_rows(tp) + smidt_rows(sm)
    print_table(rows)
    print(f"\nwall time {time.perf_counter() - t0:.1f} s")
    if "--record" in sys.argv:
        data = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "data"
        tables = {"mixserve": ms, "semmoe": sem, "semmoe_tp": tp, "smidt": sm}
        record(data / "bench_serve_papers.json", tables, fused, rows)
