"""``moeplan recommend``: the fewest GPUs of a cluster kind, and the deployment, that serve a
target request rate under the SLOs — with the search's certificate for the size below.

The sizes tried, smallest first: powers of two of GPUs within one node of the kind (1, 2,
4, ... below a node), then whole nodes (1, 2, ...). At each size the serving search of
``moeplan plan`` runs (:func:`moeplan.search.ranking.rank.serve_rank`: every colocated layout
and P/D or attention-FFN deployment that fits, ranked by SLO-bound capacity per GPU, with
its certificate). What a size serves is the best of its kept deployments copied to fill it:
``copies x`` the deployment's SLO-bound capacity (copies fed round-robin, as ``serve-sim
--replicas``). The first size whose best serves the rate is the answer.

**Why the size below cannot.** The search's certificate bounds every deployment of that
size: each layout or pool pair left unsimulated has an upper bound of its capacity per GPU
at most the best simulated capacity (pruned by bound), or missed the SLOs at it (beaten at
the incumbent's rate); so no deployment of the size exceeds ``W`` output tokens/s per GPU,
the best simulated one, and no copies of them serve more than ``W x GPUs / mean output
length`` requests/s. Below the rate, the size is *infeasible by the search's bound*.

The answer carries the ``serve-sim`` arguments that simulate it at the rate (``check``), and
that run's figures: its percentiles meet the SLOs at the rate.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import replace
from typing import Any

from moeplan.backends import priced_engine, simulated
from moeplan.commands.steady import check_requests
from moeplan.errors import MoeplanError, check_int, require
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.families import POOLED_FAMILIES
from moeplan.planners.rank import PROPOSING_FAMILIES, plan
from moeplan.search.capacity.slo import SteadyProbe, window_metrics
from moeplan.search.job.memo_cost import memo_cost
from moeplan.search.job.outcome import sources_line
from moeplan.search.ranking.entries import Served
from moeplan.search.ranking.rank import serve_rank
from moeplan.search.ranking.result import ServeRanking
from moeplan.search.ranking.sweep import instance_gpus, point_probe
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.specs import ClusterSpec, ModelSpec, Workload, load_cluster, load_model
from moeplan.specs.cluster import MAX_NODES

#: the largest number of nodes tried (this command's choice: a search per size)
MAX_RECOMMEND_NODES = min(16, MAX_NODES)


def sizes(kind: ClusterSpec, max_nodes: int = MAX_RECOMMEND_NODES) -> list[ClusterSpec]:
    """The clusters tried, smallest first: powers of two of GPUs within one node of
    ``kind`` (the node's GPUs alone), then 1..``max_nodes`` whole nodes."""
    out = []
    g = 1
    while g < kind.gpus_per_node:
        out.append(replace(kind, num_nodes=1, gpus_per_node=g, name=f"{kind.name}:{g}gpu"))
        g *= 2
    out += [kind.with_nodes(n) for n in range(1, max_nodes + 1)]
    return out


def best_fill(ranking: ServeRanking, cluster: ClusterSpec) -> tuple[Served, int, float] | None:
    """The kept deployment whose copies filling ``cluster`` serve the most requests/s under
    the SLOs: ``(deployment, copies, requests/s)`` (None when none meets them)."""
    best = None
    for x in ranking.ranked:
        rate = x.result.max_rate_meeting_slo_rps
        if not x.result.meets_slo or not rate:
            continue
        k = cluster.num_gpus // x.entry.gpus
        total = k * rate
        if best is None or total > best[2] * (1 + 1e-12):
            best = (x, k, total)
    return best


def bound_per_gpu(ranking: ServeRanking) -> float:
    """The certificate's bound: no deployment of the ranking's cluster serves more output
    tokens/s per GPU under the SLOs (module docstring): the best simulated capacity, or a
    bound left unsimulated when larger (the colocated and disaggregated searches')."""
    s = ranking.search
    cert = s.get("certificate") or {}
    dis = s.get("disaggregated") or {}
    vals = [cert.get("winner_capacity", 0.0), cert.get("best_remaining_bound", 0.0)]
    vals += [v for k, v in dis.items() if isinstance(v, float | int) and "capacity" in k]
    vals += [v for k, v in dis.items() if isinstance(v, float | int) and "bound" in k]
    osl = ranking.workload.osl.mean
    for x in ranking.ranked:  # every simulated capacity (a disaggregated winner's own)
        if x.result.max_rate_meeting_slo_rps:
            vals.append(x.result.max_rate_meeting_slo_rps * osl / x.entry.gpus)
    return max(vals)


def _rank(
    model: ModelSpec, cluster: ClusterSpec, w: ServeWorkload, slo: SLO, engine: str, requests: int
) -> tuple[ServeRanking | None, str, Any]:
    """The serving search on ``cluster`` (None and why when no deployment fits it) and the
    cost model it priced with."""
    cost = memo_cost(engine_cost_model(cluster, None, engine=priced_engine("engine", engine)))
    analytic = Workload(phase="both", batch=1, isl=int(w.isl.mean), osl=int(w.osl.mean))
    try:
        result = plan(model, cluster, analytic, cost, families=PROPOSING_FAMILIES)
        ranking = serve_rank(result, cost, w, slo, engine=engine, rate_given=False,
                             requests=requests)  # fmt: skip
    except MoeplanError as err:
        return None, str(err), cost
    return ranking, "", cost


def _size_record(cluster: ClusterSpec, ranking: ServeRanking | None, why: str) -> dict[str, Any]:
    """One size tried: its GPUs, the best it serves and the certificate's bound."""
    rec: dict[str, Any] = {"cluster": cluster.name, "nodes": cluster.num_nodes,
                           "gpus": cluster.num_gpus}  # fmt: skip
    if ranking is None:
        return {**rec, "serves_rps": 0.0, "bound_rps": 0.0, "reason": why}
    best = best_fill(ranking, cluster)
    w = bound_per_gpu(ranking)
    rec.update(
        serves_rps=0.0 if best is None else best[2],
        deployment=None if best is None else best[0].entry.layout_label,
        bound_output_tokens_per_s_per_gpu=w,
        bound_rps=w * cluster.num_gpus / ranking.workload.osl.mean,
        certificate=_certificate(ranking),
    )
    return rec


def _certificate(ranking: ServeRanking) -> dict[str, Any]:
    """The search's certificate and capacity records (``plan --json``'s ``search``) without
    its wall time."""
    dis = ranking.search.get("disaggregated")
    if dis is None:
        return dict(ranking.search)
    return {**ranking.search, "disaggregated": {k: v for k, v in dis.items() if k != "seconds"}}


def check_args(x: Served, copies: int, rate: float) -> list[str]:
    """The ``serve-sim`` arguments that simulate ``copies`` of ``x`` at ``rate`` requests/s
    in all: a colocated instance with its replicas, knobs, chunk and running cap; one copy of
    a pooled deployment at its share (copies are fed round-robin)."""
    if x.entry.family in POOLED_FAMILIES:
        return ["--pd", pd_arg(x), "--rate", f"{rate / copies!r}"]
    lay, cfg, kn = x.result.layout, x.result.engine, x.result.knobs
    out = ["--attn-tp", str(lay.attn_tp), "--attn-dp", str(lay.attn_dp), "--moe-tp",
           str(lay.moe_tp), "--moe-ep", str(lay.moe_ep), "--pp", str(lay.pp),
           "--replicas", str(copies * x.entry.replicas), "--rate", f"{rate!r}"]  # fmt: skip
    if lay.pp > 1:
        out += ["--micro-batches", str(lay.micro_batches)]
    if cfg is not None:
        out += ["--chunk-tokens", str(cfg.chunk_tokens), "--max-running", str(cfg.max_running)]
    if kn is not None:
        out += ["--a2a", kn.a2a, "--tbo" if kn.tbo else "--no-tbo", "--kv-dtype", kn.kv_dtype]
        if kn.mem_fraction is not None:
            out += ["--mem-fraction", f"{kn.mem_fraction!r}"]
    return out


def pd_arg(x: Served) -> str:
    """``serve-sim --pd``'s ``X*LAYOUT:Y*LAYOUT`` of a pooled deployment (its label's
    counts and layouts, :mod:`moeplan.serve.pools.pd_spec`)."""
    lay = x.entry.layout
    return f"{lay.x}*{lay.prefill.label}:{lay.y}*{lay.decode.label}"  # type: ignore[union-attr]


def recommend(
    *,
    model: str,
    cluster: str,
    rate: float,
    ttft_slo_ms: float,
    tpot_slo_ms: float,
    percentile: float = 90.0,
    isl: int = 2048,
    osl: int = 256,
    engine: str = "sglang",
    requests: int = 500,
    seed: int = 0,
    max_nodes: int = MAX_RECOMMEND_NODES,
) -> dict[str, Any]:
    """The answer of ``moeplan recommend`` (module docstring) as a JSON object; one-line
    :class:`MoeplanError` on bad input or when ``max_nodes`` nodes do not serve the rate."""
    require(math.isfinite(rate) and rate > 0, f"--rate ({rate}) must be a positive number")
    require(ttft_slo_ms > 0, f"--ttft-slo ({ttft_slo_ms}) must be > 0")
    require(tpot_slo_ms > 0, f"--tpot-slo ({tpot_slo_ms}) must be > 0")
    check_int("--isl", isl, 1, 10**7)
    check_int("--osl", osl, 1, 10**7)
    check_requests(requests, percentile, 50, 100_000)
    require(
        percentile in (50.0, 90.0, 99.0), f"--slo-percentile ({percentile}) must be 50, 90 or 99"
    )
    engines = simulated()
    require(engine in engines, f"--engine ({engine!r}) must be one of {', '.join(engines)}")
    m = load_model(model)
    kind = load_cluster(cluster)
    slo = SLO(ttft_s=ttft_slo_ms / 1e3, tpot_s=tpot_slo_ms / 1e3, percentile=percentile)
    w = ServeWorkload(num_requests=requests, rate=rate, isl=LengthDist(mean=isl),
                      osl=LengthDist(mean=osl), seed=seed)  # fmt: skip
    tried: list[dict[str, Any]] = []
    for c in sizes(kind, max_nodes):
        ranking, why, cost = _rank(m, c, w, slo, engine, requests)
        rec = _size_record(c, ranking, why)
        tried.append(rec)
        if ranking is None or rec["serves_rps"] < rate:
            continue
        best = best_fill(ranking, c)
        assert best is not None
        return _answer(m, c, w, slo, rate, best, ranking, tried, cost, (kind.name, engine))
    raise MoeplanError(
        f"--rate ({rate:g} req/s) is more than {max_nodes} nodes of {kind.name} serve under "
        f"the SLOs: the most is {max(r['serves_rps'] for r in tried):.4g} req/s"
    )


def _answer(
    m: ModelSpec,
    c: ClusterSpec,
    w: ServeWorkload,
    slo: SLO,
    rate: float,
    best: tuple[Served, int, float],
    ranking: ServeRanking,
    tried: list[dict[str, Any]],
    cost: Any,
    asked: tuple[str, str],
) -> dict[str, Any]:
    """The JSON answer at size ``c`` (``asked``: the cluster kind and engine the question
    named, which the check's ``serve-sim`` arguments repeat): the deployment, its check run at ``rate`` and why the
    size below does not serve it."""
    x, copies, serves = best
    chk, probe = _check(x, copies, rate, w, slo, m, c, cost, asked)
    below = tried[-2] if len(tried) > 1 else None
    proof = None
    if below is not None:
        proof = {
            **{k: below[k] for k in ("cluster", "gpus", "serves_rps", "bound_rps")},
            "infeasible_by_bound": below["bound_rps"] < rate,
            "sentence": (
                f"{below['gpus']} GPUs serve at most {below['bound_rps']:.4g} req/s under the "
                f"SLOs by the search's bound (no deployment exceeds "
                f"{below.get('bound_output_tokens_per_s_per_gpu', 0.0):,.0f} output tokens/s "
                f"per GPU), below {rate:g} req/s"
                if below["bound_rps"] < rate
                else f"{below['gpus']} GPUs: the best kept deployment serves "
                f"{below['serves_rps']:.4g} req/s, below {rate:g} req/s (the bound, "
                f"{below['bound_rps']:.4g} req/s, does not exclude it)"
            ),
        }
    return {
        "model": m.name,
        "rate_rps": rate,
        "slo": slo.to_dict(),
        "gpus": c.num_gpus,
        "nodes": c.num_nodes,
        "cluster": c.name,
        "deployment": {
            "family": x.entry.family,
            "layout": x.entry.layout_label,
            "gpus": x.entry.gpus,
            "copies": copies,
            "max_rate_meeting_slo_rps": x.result.max_rate_meeting_slo_rps,
            "serves_rps": serves,
            "batch_cap": None if x.result.engine is None else x.result.engine.max_running,
        },
        "certificate": _certificate(ranking),
        "certificate_sentence": ranking.certificate_sentence,
        "smaller": proof,
        "sizes_tried": [{k: v for k, v in r.items() if k != "certificate"} for r in tried],
        "check": chk,
        "price_sources": _check_price_sources(x, copies, rate, w, m, c, cost, probe),
    }


def _check_price_sources(
    x: Served,
    copies: int,
    rate: float,
    w: ServeWorkload,
    m: ModelSpec,
    c: ClusterSpec,
    cost: Any,
    probe: SteadyProbe,
) -> dict[str, Any]:
    """``price_sources`` of the answer at ``rate`` (:mod:`moeplan.cost.price_sources`): the
    seconds of the check's steady run ``probe`` of one instance per price source, or, pooled, both
    pools' instances simulated at their share of the rate (as ``plan`` splits a P/D
    winner); ``{}`` where a pool is not an engine instance (an attention-FFN pool)."""
    from moeplan.serve.iteration.model import IterationModel
    from moeplan.serve.iteration.price_sources import pd_run_price_sources, run_price_sources

    r = x.result
    if x.entry.family in POOLED_FAMILIES:
        setup = getattr(r, "setup", None)
        if setup is None:
            return {}
        return pd_run_price_sources(setup, w.with_rate(rate / copies), m, c, cost)
    lay = r.layout

    def priced(cm: Any) -> IterationModel:
        return IterationModel(m, c, cm, lay, knobs=r.knobs)

    return run_price_sources(cost, priced, probe.res)


def _check(
    x: Served,
    copies: int,
    rate: float,
    w: ServeWorkload,
    slo: SLO,
    m: ModelSpec,
    c: ClusterSpec,
    cost: Any,
    asked: tuple[str, str],
) -> tuple[dict[str, Any], SteadyProbe]:
    """The answer simulated at ``rate`` as ``serve-sim`` does (its arguments, every one the
    question fixed, and figures) and that run."""
    pooled = x.entry.family in POOLED_FAMILIES
    at = rate / copies if pooled else rate
    if pooled:
        p = point_probe(x, w, slo, at, m, c, cost)
    else:  # every copy of the instance: the round-robin feed over copies x its replicas
        one = replace(x, entry=replace(x.entry, replicas=copies * x.entry.replicas))
        p = point_probe(one, w, slo, at, m, c, cost)
    mt = window_metrics(p, instance_gpus(x), slo)
    ttft, tpot = mt.at_percentile(slo.percentile)
    return {
        "serve_sim_args": [
            "--cluster",
            asked[0],
            "--nodes",
            str(c.num_nodes),
            "--engine",
            asked[1],
            "--isl",
            str(round(w.isl.mean)),
            "--osl",
            str(round(w.osl.mean)),
            "--ttft-slo",
            f"{slo.ttft_s * 1e3:g}",
            "--tpot-slo",
            f"{slo.tpot_s * 1e3:g}",
            "--slo-percentile",
            f"{slo.percentile:g}",
            "--requests",
            str(w.num_requests),
            "--seed",
            str(w.seed),
            *check_args(x, copies, rate),
        ],  # fmt: skip
        "rate_rps": rate,
        f"ttft_p{slo.percentile:g}_s": ttft,
        f"tpot_p{slo.percentile:g}_s": tpot,
        "stable": p.stable,
        "meets_slo": p.meets(slo),
    }, p


#: Leads a line of :func:`answer_lines` that is a shell command (printed unwrapped, to copy).
COMMAND_INDENT = "  "


def answer_lines(out: dict[str, Any]) -> list[str]:
    """The answer in words: the size, the deployment, the check run and the proof below."""
    d, chk, pct = out["deployment"], out["check"], f"p{out['slo']['percentile']:g}"
    copies = f"{d['copies']} copies of " if d["copies"] > 1 else ""
    lines = [
        f"{out['gpus']} GPUs ({out['cluster']}) serve {out['rate_rps']:g} req/s of "
        f"{out['model']} under the SLOs: {copies}{d['layout']} ({d['family']}, "
        f"{d['gpus']} GPUs each), {d['serves_rps']:.4g} req/s at most.",
        f"Check: TTFT {pct} {chk[f'ttft_{pct}_s'] * 1e3:,.0f} ms, TPOT {pct} "
        f"{chk[f'tpot_{pct}_s'] * 1e3:,.1f} ms, {'meets' if chk['meets_slo'] else 'misses'} "
        "the SLOs; the run:",
        f"{COMMAND_INDENT}moeplan serve-sim --model {shlex.join([out['model']])} "
        f"{shlex.join(chk['serve_sim_args'])}",
    ]
    if out["price_sources"]:
        lines.append(sources_line(out["price_sources"], "the check run's engine iterations"))
    if out["smaller"] is not None:
        lines.append(f"One size fewer: {out['smaller']['sentence']}.")
    lines.append(out["certificate_sentence"])
    return lines
