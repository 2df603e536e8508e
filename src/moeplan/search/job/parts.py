"""Parts of :func:`moeplan.search.job.run.plan_job`'s outcome: what limits the winner, the copies that
fill the cluster, whether Sem-MoE changes the answer, the fitted profile's held-out errors,
memory notes for a cut model, and each instance's EP degree."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moeplan.cost import CostModel
from moeplan.planners.layout import Layout
from moeplan.search.colocated.evaluate import limiting_part
from moeplan.search.job.outcome import ClusterFill
from moeplan.search.ranking.result import ServeRanking
from moeplan.serve.deployment import PDLayout, of
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.specs import ClusterSpec, ModelSpec
from moeplan.units import GIB

if TYPE_CHECKING:
    from moeplan.planners.placement.result import PlacementResult

#: Sem-MoE "changes the answer" when its held-out MoE layer time beats contiguous placement by
#: more than this fraction: the fallback guard keeps placements up to 0.8 % worse than
#: contiguous on a held-out test split (moeplan.planners.placement.guard, bench/bench_guard.py),
#: so a smaller gain is not one the validation data can tell apart.
PLACEMENT_GAIN = 0.01
#: The fitted profile whose held-out errors are stated when the cluster's own profile states
#: none (NVIDIA's H100 tables, moeplan/cost/profiles/h100_sxm.json).
REFERENCE_PROFILE = "h100_sxm"


def instance_eps(layout: Layout | PDLayout) -> list[tuple[str, int]]:
    """(instance pool, EP degree) of a served layout: ``prefill`` and ``decode`` for a P/D or
    attention-FFN deployment (each pool is its own instance), one unnamed pool otherwise."""
    return of(layout).visit(
        pd=lambda pd: [("prefill", pd.prefill.moe_ep), ("decode", pd.decode.moe_ep)],
        colocated=lambda d: [("", d.layout.moe_ep)],
        afd=lambda a: [("", a.moe_ep)],
    )


def step_bound(
    ranking: ServeRanking, model: ModelSpec, cluster: ClusterSpec, cost: CostModel
) -> str | None:
    """The largest part of the winner's engine step at its analytic batch (KV capacity when it
    preempts), as the search prices it (:func:`moeplan.search.colocated.evaluate.limiting_part`); ``None`` for a
    disaggregated winner (its pools' bound is in its result) or without an estimate."""
    r = ranking.winner.result
    lay, est, m = r.layout, r.estimate, r.metrics
    if est is None or m is None or of(lay).colocated_layout is None:
        return None
    w = ranking.workload
    ev = IterationModel(model, cluster, cost, lay, knobs=r.knobs)
    bd = ev.breakdown(Batch(est.batch, int(w.isl.mean + w.osl.mean // 2), ()))
    return limiting_part(bd, m, model, cluster, lay, est.batch)


def winner_graphs(
    ranking: ServeRanking, engine: str, model: ModelSpec, cluster: ClusterSpec
) -> dict[str, Any] | None:
    """The colocated winner's steady run outside the engine's CUDA graphs
    (:func:`moeplan.serve.cuda_graphs.graphs_record`); None for a deployment that keeps no
    such run (disaggregated pools, an analytic result)."""
    from moeplan.serve.cuda_graphs import graphs_record

    r = ranking.winner.result
    probe = getattr(r, "run", None)
    if probe is None or r.engine is None or not hasattr(r.layout, "attn_dp"):
        return None
    return graphs_record(engine, model, cluster, r.layout, r.engine, r.knobs, [probe.res])


def winner_price_sources(
    ranking: ServeRanking, model: ModelSpec, cluster: ClusterSpec, cost: CostModel
) -> dict[str, Any]:
    """``price_sources`` of the winner (:mod:`moeplan.cost.price_sources`): the seconds of its
    steady run (warm-up and drain included) per price source, or of its engine step at its
    analytic batch when the result keeps no run; a disaggregated winner's pools simulated
    again at its operating load (both pools' instances' runs together); ``{}`` where a pool
    is not an engine instance (an attention-FFN pool)."""
    from moeplan.serve.iteration.price_sources import run_price_sources, step_price_sources

    r = ranking.winner.result
    lay = r.layout
    setup = getattr(r, "setup", None)
    if setup is not None:
        return _pools_price_sources(ranking, model, cluster, cost)
    if not hasattr(lay, "attn_dp"):
        return {}

    def priced(cm: CostModel) -> IterationModel:
        return IterationModel(model, cluster, cm, lay, knobs=r.knobs)

    probe = getattr(r, "run", None)
    if probe is not None:
        return run_price_sources(cost, priced, probe.res)
    if r.estimate is None:
        return {}
    w = ranking.workload
    batch = Batch(r.estimate.batch, int(w.isl.mean + w.osl.mean // 2), ())
    return step_price_sources(cost, lambda cm: priced(cm)(batch))


def _pools_price_sources(
    ranking: ServeRanking, model: ModelSpec, cluster: ClusterSpec, cost: CostModel
) -> dict[str, Any]:
    """:func:`winner_price_sources` of a disaggregated winner (its ``setup``), at the load
    its timeline shows (the user's rate, else its largest SLO rate)."""
    from moeplan.serve.iteration.price_sources import pd_run_price_sources

    r = ranking.winner.result
    wl = ranking.workload
    if not ranking.rate_given and r.max_rate_meeting_slo_rps:
        wl = wl.with_rate(r.max_rate_meeting_slo_rps)
    return pd_run_price_sources(r.setup, wl, model, cluster, cost)


def limits_sentence(ranking: ServeRanking, step: str | None) -> str:
    """What limits the winner, in the words of the lead sentence and the serving table (its
    ``bound``, :func:`moeplan.search.capacity.slo.limit_words`), with the share of each SLO
    it uses at its operating point and where each engine step's time goes."""
    w = ranking.winner
    m, slo = w.metrics, ranking.slo
    if m is None:
        return w.result.reason
    ttft, tpot = m.at_percentile(slo.percentile)
    uses = [f"{k} {v / lim:.0%}" for k, v, lim in (("TTFT", ttft, slo.ttft_s),
                                                   ("TPOT", tpot, slo.tpot_s)) if lim]  # fmt: skip
    use = f"SLO use at p{slo.percentile:g}: {', '.join(uses)}" if uses else "no SLO set"
    step_part = f"; within each engine step the most time goes to {step}" if step else ""
    return f"What limits this deployment: {w.result.bound}. {use}{step_part}."


def cluster_fill(ranking: ServeRanking, cluster_gpus: int) -> ClusterFill | None:
    """Copies of the winner that fit the cluster when it uses part of it (None otherwise)."""
    w = ranking.winner
    g, m = w.entry.gpus, w.metrics
    if m is None or g >= cluster_gpus:
        return None
    k = cluster_gpus // g
    return ClusterFill(gpus=g, cluster_gpus=cluster_gpus, copies=k,
                       idle_gpus=cluster_gpus - k * g, output_tokens_per_s=m.output_tokens_per_s,
                       total_output_tokens_per_s=k * m.output_tokens_per_s)  # fmt: skip


def placement_changes(placement: PlacementResult | None, trace: str | None) -> bool:
    """Sem-MoE changes what is launched: a real trace (its placement is exported), the guard
    kept it, and its held-out MoE layer time beats contiguous by more than PLACEMENT_GAIN."""
    if placement is None or trace is None or placement.fallback:
        return False
    sem = placement.methods["semmoe"].metrics["moe_layer_time_s"]
    base = placement.methods["contiguous"].metrics["moe_layer_time_s"]
    return bool(sem < base * (1 - PLACEMENT_GAIN))


def profile_fit(cost: CostModel) -> dict[str, Any]:
    """The GEMM/NCCL model's held-out errors: the cluster's fitted profile, or (when its
    coefficients are published, or there is none) the reference H100 fit, said as such."""
    from moeplan.cost import load_profile

    prof = cost.profile
    if prof is not None and prof.quality:
        note = f"Profile {prof.name} ({prof.source}), fitted to measurements."
    elif prof is not None:
        note = (
            f"Profile {prof.name} ({prof.source}): published coefficients, not fitted here, "
            "so their error is unknown; for reference, the held-out errors of the H100 "
            "model fitted to NVIDIA's measurements:"
        )
    else:
        note = (
            f"{cost.profile_name}: no profile for this GPU, datasheet rooflines (70% of "
            "peak FLOP/s, 80% of memory bandwidth); their error is unmeasured. For "
            "reference, the held-out errors of the H100 model fitted to NVIDIA's "
            "measurements:"
        )
    if prof is None or not prof.quality:
        prof = load_profile(REFERENCE_PROFILE)
    rows = [{"fit": k, "r2": q.r2, "heldout_median": q.heldout_median_ape,
             "heldout_p90": q.heldout_p90_ape, "rows": f"{q.n_fit}+{q.n_heldout}"}
            for k, q in prof.quality.items()]  # fmt: skip
    return {"profile": prof.name, "source": prof.source, "note": note, "rows": rows}


def fit_notes(model: ModelSpec, cluster: ClusterSpec, full: ModelSpec | None) -> list[str]:
    """When planned on a cut model: whether the full model's weights fit the cluster."""
    if full is None or model.num_layers >= full.num_layers:
        return []
    from moeplan.cost.memory import RESERVED_BYTES, weights_floor_per_gpu

    need = weights_floor_per_gpu(full, cluster.num_gpus)
    usable = cluster.gpu.mem_bytes - RESERVED_BYTES
    if need <= usable:
        return []
    return [
        f"the full model's weights alone need {need / GIB:.1f} GiB per GPU even spread over "
        f"all {cluster.num_gpus} GPUs; {cluster.gpu.name} has {usable / GIB:.1f} GiB usable: "
        "this launch will run out of memory"
    ]
