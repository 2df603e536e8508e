"""The whole outcome of ``moeplan plan``, computed once (:func:`moeplan.search.job.run.plan_job`).

Everything the terminal, ``--json``, report.html, the launch files and plan.json show is a
field here: the families' analytic searches, the serving ranking and its winner, the curves
and Chrome trace of the winner's simulated runs, FinDEP's schedules, the Sem-MoE placement,
the kernel-price sources with their held-out errors, what limits the winner and how many
copies fill the cluster. The CLI, :mod:`moeplan.report` and :mod:`moeplan.export` format it;
they compute nothing (tests/test_architecture.py holds them to that).

This module holds data only: it imports types, never a planner or simulator function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from moeplan.planners.plan import Plan
from moeplan.specs import ClusterSpec, ModelSpec

if TYPE_CHECKING:
    from moeplan.planners.placement.result import PlacementResult
    from moeplan.planners.rank import PlanResult
    from moeplan.search.ranking.result import ServeRanking


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterFill:
    """When the winner uses part of the cluster: copies of it that fit and what they serve."""

    gpus: int  # the winner's GPUs
    cluster_gpus: int
    copies: int  # whole copies of the winner that fit the cluster
    idle_gpus: int  # cluster GPUs no copy uses
    output_tokens_per_s: float  # one copy, at the winner's operating point
    total_output_tokens_per_s: float  # all copies together

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": self.gpus, "cluster_gpus": self.cluster_gpus, "copies": self.copies,
            "idle_gpus": self.idle_gpus, "output_tokens_per_s": self.output_tokens_per_s,
            "total_output_tokens_per_s": self.total_output_tokens_per_s,
        }  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class PlanOutcome:
    """What ``moeplan plan`` found (module docstring); built by :func:`plan_job`."""

    model: ModelSpec  # as planned (the first --layers decoder layers when cut)
    full_layers: int  # decoder layers of the model the launch files load
    cluster: ClusterSpec
    analytic: PlanResult  # each family's own search and figure
    ranking: ServeRanking  # every deployment on the serving footing
    plan: Plan  # the served winner (ranking and, from a trace, its expert placement)
    explanation: tuple[str, ...]  # plain sentences: winner, capacity, limits, runner-up
    served_workload: dict[str, Any]  # the request stream every deployment was served
    limits: str  # what limits the winner: the SLO it uses most and the per-step bottleneck
    fill: ClusterFill | None  # None when the winner uses the whole cluster
    curves: dict[str, Any]  # latency, rate curves, load sweep and its front (ranking.views)
    side_by_side: dict[str, Any] | None = (
        None  # best aggregated vs disaggregated (views.side_by_side)
    )
    timeline: dict[str, Any]  # Chrome trace of the winner's simulated engine iterations
    dep_schedules: dict[str, Any] = field(default_factory=dict)  # FinDEP and PPPipe, 2 layers
    placement: PlacementResult | None = None  # Sem-MoE's placement on the winner's EP
    placement_note: str | None = None  # why no placement ran
    placement_changes: bool = False  # the placement is exported and beats contiguous
    winner_ep: int = 1
    pricing: dict[str, Any] = field(default_factory=dict)  # moeplan.cost.provenance.pricing
    lookup_sources: tuple[dict[str, Any], ...] = ()  # moeplan.cost.provenance.source_errors
    # the winner's priced seconds per source: moeplan.search.job.parts.winner_price_sources
    price_sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    profile_fit: dict[str, Any] = field(default_factory=dict)  # the GEMM/NCCL fits' errors
    # the winner's run outside CUDA graphs: moeplan.search.job.parts.winner_graphs
    cuda_graphs: dict[str, Any] | None = None
    quant: dict[str, Any] | None = None  # moeplan.cost.provenance.quant_vs_bf16
    fit_notes: tuple[str, ...] = ()  # e.g. the full model's weights do not fit
    model_path: str = ""  # what the launch files load
    trace: str | None = None  # the routing trace given (None: Sem-MoE ran on a synthetic one)
    timings: dict[str, float] = field(default_factory=dict)
    family_names: dict[str, str] = field(default_factory=dict)  # family key -> name in words

    @property
    def winner(self) -> Any:
        """The serving winner (:class:`moeplan.search.ranking.entries.Served`)."""
        return self.ranking.winner

    @property
    def interval(self) -> dict[str, Any]:
        """The headline capacity's error halves (:func:`moeplan.cost.price_sources.
        headline_interval`): the winner's 95 % capacity interval from the capacity search
        (none when the rate was given or the record is another layout's) beside its kernel
        prices' band."""
        from moeplan.cost.price_sources import headline_interval

        rec = self.ranking.search.get("winner_capacity") or {}
        same = rec.get("layout") == self.winner.entry.layout.label
        half = rec.get("ci95_half_width_rel") if same and not self.ranking.rate_given else None
        return headline_interval(half, self.price_sources)


def quant_sentence(q: dict[str, Any] | None) -> str | None:
    """A quantized checkpoint priced slower than bf16 by the engine's own table, in words
    (``q``: :func:`moeplan.cost.provenance.quant_vs_bf16`)."""
    if q is None:
        return None
    return (
        f"{q['table']} prices this checkpoint's {q['dtype']} experts slower than bf16 "
        f"ones on one GPU of EP{q.get('ep', 1)} x TP{q.get('tp', 1)}: "
        f"{q['quant_s'] * 1e3:.3f} ms ({q['quant_source']}) vs "
        f"{q['bf16_s'] * 1e3:.3f} ms ({q['bf16_source']}) for {q['tokens']} tokens, "
        f"{q['ratio']:.2f}x. moeplan prices what the engine's kernels measure, so this "
        "plan ranks the quantized checkpoint below what its smaller weights suggest"
    )


def pricing_line(p: dict[str, Any]) -> str:
    """One line for terminals and script headers: engine, tables, source mix
    (``p``: :func:`moeplan.cost.provenance.pricing`)."""
    if p["engine"] is None:
        return f"kernel prices: {p['note']}"
    mix = ", ".join(f"{s} {v['share']:.0%}" for s, v in p["sources"].items()) or "none used"
    line = f"kernel prices: {p['note']}; sources of {p['lookups']:,} kernel lookups: {mix}"
    return line + version_text(p.get("engine_version"))


def release_label(p: dict[str, Any] | None) -> str:
    """`` <release>`` (or `` (newest kernel tables)``) after an engine's name in a header
    (``p``: :func:`moeplan.cost.provenance.pricing`); nothing without an engine."""
    v = (p or {}).get("engine_version")
    if not v:
        return ""
    return " (newest kernel tables)" if v["requested"] is None else f" {v['requested']}"


def version_text(v: dict[str, Any] | None) -> str:
    """``; <engine> <version>: ...`` — the engine version and how each operation's table
    prices it (``v``: :func:`moeplan.cost.provenance.engine_version`); nothing for none."""
    if not v:
        return ""
    if v["requested"] is None:
        tables = sorted({r["table_version"] for r in v["ops"].values()})
        return f"; {v['engine']} version: the newest table of each kernel ({', '.join(tables)})"
    groups: dict[tuple, list[str]] = {}
    for op, r in v["ops"].items():
        err = r.get("error_median")
        key = (r["how"], r["table_version"], err, r.get("error_p90"))
        groups.setdefault(key, []).append(op)
    parts = []
    for (how, table, med, p90), ops in sorted(groups.items(), key=lambda g: g[0][:2]):
        what = f"{how} ({table})" if how != "measured" else "measured"
        if how != "measured":
            what += (
                f", transfer error median {med:.0%} / p90 {p90:.0%}"
                if med is not None
                else ", transfer error not measured"
            )
        parts.append(f"{', '.join(ops)}: {what}")
    return f"; {v['engine']} {v['requested']}: " + "; ".join(parts)


def sources_line(ps: dict[str, dict[str, Any]], what: str) -> str:
    """One line for terminals: each source's share of the priced seconds of ``what``, with
    its held-out error (``ps``: :func:`moeplan.cost.price_sources.summarize`)."""
    parts = []
    for src, r in ps.items():
        if r["seconds"] <= 0.0:
            continue
        err = r["heldout_error"]
        parts.append(f"{src} {r['share']:.0%}" + (f" (error {err:.0%})" if err is not None else ""))
    return f"price sources (shares of the priced seconds of {what}): " + (
        ", ".join(parts) or "none"
    )


def interval_line(rec: dict[str, Any]) -> str:
    """One line for terminals: the headline figure's simulation-noise half-width beside the
    kernel prices' error band and which dominates (``rec``:
    :func:`moeplan.cost.price_sources.headline_interval`)."""
    sim, band = rec["simulation_noise_rel"], rec["kernel_price_error_rel"]
    sim_txt = "no interval (one simulated run)" if sim is None else f"+/-{sim:.1%} (95 %)"
    if band is None:
        band_txt = "no held-out figure for any priced second"
    else:
        cov = rec["kernel_price_error_covers"]
        band_txt = f"+/-{band:.1%} (median)" + (
            "" if cov >= 0.995 else f" over {cov:.0%} of priced seconds"
        )
    lead = f"; dominant: {rec['dominant']}" if rec["dominant"] else ""
    if band is not None and sim is not None and not rec["dominant"]:
        lead = "; no half named: most priced seconds have no held-out figure"
    return f"interval: simulation noise {sim_txt}, kernel prices {band_txt}{lead}"


def graphs_line(rec: dict[str, Any] | None) -> str | None:
    """The line a command prints under its figures for a run that
    :mod:`moeplan.serve.cuda_graphs` flags (``rec``: its record; None: not flagged)."""
    if not rec or not rec["flagged"]:
        return None
    return (
        f"outside CUDA graphs: {rec['engine_time_above_share']:.0%} of the engine's time is in "
        f"decode steps of more than {rec['capture_max_batch_per_rank']} sequences per rank, "
        "above the engine's CUDA-graph capture size; moeplan prices them with graph-captured "
        "kernel times, so these figures are optimistic (moeplan validate scores such runs "
        "apart)"
    )


def host_line(rec: dict[str, Any] | None) -> str | None:
    """The line stating a run's engine host work (:mod:`moeplan.serve.host_record`'s record;
    None without an engine)."""
    if not rec:
        return None
    how = (
        "overlapped with the GPU step (a step waits only where it is longer)"
        if rec["overlapped"]
        else "in series with the GPU step (--overlap-schedule prices the engine's overlap, "
        "vLLM's --async-scheduling)"
    )
    return (
        f"engine host work: {rec['seconds_per_sequence'] * 1e6:.1f} us per sequence per step, "
        f"{how}; the decode sequences' share of the engine's time {rec['decode_host_share']:.0%} "
        "(one published figure for every engine: moeplan/cost/host.py)"
    )
