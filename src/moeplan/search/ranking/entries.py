"""What the serving ranking ranks: a deployment to serve (:class:`Entry`) and its answer
(:class:`Served`). Shared by :mod:`moeplan.search.ranking.rank` (colocated families) and
:mod:`moeplan.search.disagg.rank` (P/D and attention-FFN pools)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from moeplan.planners.plan import Plan
from moeplan.search.colocated.evaluate import ServeResult
from moeplan.serve.layout import ServeLayout
from moeplan.serve.metrics import INTERFACE_METRICS, ServeMetrics


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One deployment to serve: its family, the family's plan, and the serving layout."""

    family: str
    label: str
    layout: ServeLayout
    plan: Plan
    replicas: int = 1
    """Independent instances of ``layout`` (SMIDT's DPMoE replicas); each gets 1/replicas of
    the load, so per-GPU metrics are one instance's and totals scale by ``replicas``."""

    @property
    def gpus(self) -> int:
        return self.layout.gpus * self.replicas

    @property
    def layout_label(self) -> str:
        """The layout's one label with this entry's replica count."""
        if self.replicas == 1:  # P/D and AFD pools carry their own label
            return self.layout.label
        return replace(self.layout, replicas=self.replicas).label


@dataclass(frozen=True, kw_only=True)
class Served:
    """A deployment with its serving answer (``result.metrics`` None when infeasible)."""

    entry: Entry
    result: ServeResult
    estimate_tokens_per_s_per_gpu: float

    @property
    def metrics(self) -> ServeMetrics | None:
        return self.result.metrics

    def summary(self) -> dict[str, Any]:
        """One ranked candidate of ``moeplan plan --json`` (keys per the interface)."""
        m = self.metrics
        # every interface key but the SLO rate, which the search result carries
        keys = [k for k in INTERFACE_METRICS if k != "max_rate_meeting_slo_rps"]
        metrics = {} if m is None else {k: getattr(m, k) for k in keys}
        if m is not None:
            metrics["max_rate_meeting_slo_rps"] = self.result.max_rate_meeting_slo_rps
            metrics["requests"] = m.requests
        return {
            "family": self.entry.family,
            "label": self.entry.label,
            "layout": self.entry.layout_label,
            "gpus": self.entry.gpus,
            "meets_slo": self.result.meets_slo,
            "feasible": self.result.feasible,
            "reason": self.result.reason,
            "bound": self.result.bound,
            "engine": self.result.to_dict()["engine"],
            "knobs": None if self.result.knobs is None else self.result.knobs.to_dict(),
            "metrics": metrics,
            "estimate_output_tokens_per_s_per_gpu": self.estimate_tokens_per_s_per_gpu,
            **self.deployment(),
        }

    def deployment(self) -> dict[str, Any]:
        """What was served, exactly, for a colocated entry (``serve-sim --plan`` simulates it
        again): the instance's degrees (``serve_layout``) and its ``replicas``; {} for pools."""
        lay = self.entry.layout
        if not isinstance(lay, ServeLayout):
            return {}
        return {"serve_layout": lay.to_dict(), "replicas": self.entry.replicas}
