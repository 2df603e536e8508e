"""The result of ``moeplan plan``'s serving ranking (:class:`ServeRanking`) and the arithmetic
of replicated deployments.

A SMIDT plan whose DPMoE replication ``d`` divides the attention DP is served as ``d``
independent replicas (:func:`moeplan.search.ranking.family_layouts.pipeline_entries`): one replica is
simulated on its share of the load (:func:`_per_replica`, round-robin) and its result scaled
to the whole deployment (:func:`all_replicas`: totals and rates times ``d``, per-GPU figures
and latencies unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from moeplan.search.colocated.evaluate import ServeResult
from moeplan.search.ranking.entries import Entry, Served
from moeplan.serve.metrics import SLO
from moeplan.serve.workload.arrivals import ServeWorkload


@dataclass(frozen=True, kw_only=True)
class ServeRanking:
    """The serving answer of ``moeplan plan``: ranked deployments, Pareto front, notes."""

    objective: str
    slo: SLO
    workload: ServeWorkload
    ranked: tuple[Served, ...]
    pruned: tuple[tuple[Entry, float], ...]
    not_served: dict[str, str] = field(default_factory=dict)
    rate_given: bool = True
    """False: no rate was given; each plan's metrics are at its largest SLO-meeting rate."""
    search: dict[str, Any] = field(default_factory=dict)
    """The space search's certificate and the winner's capacity record (JSON ``search``)."""
    certificate_sentence: str = ""

    @property
    def winner(self) -> Served:
        return self.ranked[0]


def _per_replica(workload: ServeWorkload, replicas: int) -> ServeWorkload:
    """One replica's share of the load (round-robin over ``replicas`` instances)."""
    if replicas == 1:
        return workload
    if workload.concurrency is not None:
        return replace(workload, concurrency=max(1, workload.concurrency // replicas))
    return replace(workload, rate=(workload.rate or 1.0) / replicas)


def all_replicas(r: ServeResult, replicas: int) -> ServeResult:
    """One replica's result as the whole deployment's: totals and rates times ``replicas``,
    per-GPU figures and latencies unchanged."""
    if replicas == 1 or r.metrics is None:
        return r
    m = r.metrics
    scaled = replace(
        m,
        gpus=m.gpus * replicas,
        requests=m.requests * replicas,
        output_tokens_per_s=m.output_tokens_per_s * replicas,
        total_tokens_per_s=m.total_tokens_per_s * replicas,
        goodput_rps=m.goodput_rps * replicas,
    )
    rate = r.max_rate_meeting_slo_rps
    return replace(
        r, metrics=scaled, max_rate_meeting_slo_rps=None if rate is None else rate * replicas
    )
