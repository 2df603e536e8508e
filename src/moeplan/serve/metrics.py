"""Serving metrics from a simulation run: latency percentiles, throughput per GPU, goodput.

Definitions (the names used in JSON keys and the CLI):

- TTFT: first token time minus arrival. TPOT: ``(finish - first token) / (osl - 1)``, the mean
  inter-token time after the first (requests with one output token have none). ITL: every
  gap between consecutive tokens of a request (its distribution over all tokens).
  E2E: finish minus arrival. Wait: admission minus arrival (queueing only).
- Throughput over the run's span (first arrival to last finish): output tokens/s and total
  (prompt + output) tokens/s, both also per GPU of the deployment. Prompt tokens count each
  request's prompt once (recomputation after preemption is reported separately).
- SLO: a request meets it when TTFT <= ``ttft_s`` and TPOT <= ``tpot_s``. Goodput = requests
  meeting it per second (``goodput_rps``) and per second per GPU. A *run* meets the SLO when
  the ``percentile``-th percentile of TTFT and of TPOT are within their limits
  (:meth:`ServeMetrics.meets`), the criterion of the rate search.
- KV utilisation: time-weighted mean of allocated / capacity over the iterations; peak too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from moeplan.errors import require
from moeplan.serve.engine.run import SimResult

DEFAULT_PERCENTILE = 90.0
#: Keys other tools rely on: ``moeplan plan`` and ``serve-sim`` JSON.
INTERFACE_METRICS = (
    "ttft_p50_s",
    "ttft_p90_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "e2e_p90_s",
    "output_tokens_per_s",
    "output_tokens_per_s_per_gpu",
    "goodput_rps",
    "max_rate_meeting_slo_rps",
    "kv_utilisation",
    "preemptions",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class SLO:
    """Latency limits (seconds; ``None`` = unconstrained) and the percentile they bind."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    percentile: float = DEFAULT_PERCENTILE

    def __post_init__(self) -> None:
        for f in ("ttft_s", "tpot_s"):
            v = getattr(self, f)
            require(v is None or v > 0, f"slo.{f} ({v}) must be positive")
        require(
            0 < self.percentile <= 100, f"slo.percentile ({self.percentile}) must be in (0, 100]"
        )

    def to_dict(self) -> dict[str, float | None]:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "percentile": self.percentile}


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeMetrics:
    """Summary of one run (seconds, tokens/s; ``_per_gpu`` divides by the deployment's GPUs)."""

    requests: int
    gpus: int
    duration_s: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p90_s: float
    tpot_p99_s: float
    itl_p50_s: float
    itl_p90_s: float
    itl_p99_s: float
    e2e_p50_s: float
    e2e_p90_s: float
    e2e_p99_s: float
    mean_ttft_s: float
    mean_tpot_s: float
    mean_wait_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    total_tokens_per_s: float
    total_tokens_per_s_per_gpu: float
    goodput_rps: float
    goodput_rps_per_gpu: float
    slo_attainment: float
    kv_utilisation: float
    kv_peak_utilisation: float
    kv_capacity_tokens: int
    preemptions: int
    recomputed_tokens: int
    iterations: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)

    def meets(self, slo: SLO) -> bool:
        """The run's TTFT and TPOT at ``slo.percentile`` are within the limits."""
        ttft, tpot = self.at_percentile(slo.percentile)
        return (slo.ttft_s is None or ttft <= slo.ttft_s) and (
            slo.tpot_s is None or tpot <= slo.tpot_s
        )

    def at_percentile(self, p: float) -> tuple[float, float]:
        table = {
            50.0: (self.ttft_p50_s, self.tpot_p50_s),
            90.0: (self.ttft_p90_s, self.tpot_p90_s),
            99.0: (self.ttft_p99_s, self.tpot_p99_s),
        }
        require(float(p) in table, f"slo.percentile ({p}) must be one of 50, 90, 99")
        return table[float(p)]


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` repeated ``weights`` times (lower value)."""
    if len(values) == 0 or weights.sum() == 0:
        return float("nan")
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    idx = int(np.searchsorted(cum, q * (cum[-1] - 1), side="right"))
    return float(values[order][min(idx, len(values) - 1)])


def _pct(x: np.ndarray) -> tuple[float, float, float]:
    if len(x) == 0:
        return (float("nan"),) * 3
    p50, p90, p99 = np.percentile(x, (50, 90, 99))
    return float(p50), float(p90), float(p99)


def request_latencies(res: SimResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-request TTFT, TPOT (NaN when osl = 1) and E2E, seconds."""
    ttft = res.first_token_s - res.arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(res.osl > 1, (res.finish_s - res.first_token_s) / (res.osl - 1), np.nan)
    return ttft, tpot, res.finish_s - res.arrival_s


def summarize(res: SimResult, gpus: int, slo: SLO | None = None) -> ServeMetrics:
    """Metrics of ``res`` for a deployment of ``gpus`` GPUs (module docstring)."""
    slo = slo or SLO()
    ttft, tpot, e2e = request_latencies(res)
    span = float(res.finish_s.max() - res.arrival_s.min())
    span = span if span > 0 else float("nan")
    ok = np.ones(len(ttft), dtype=bool)
    if slo.ttft_s is not None:
        ok &= ttft <= slo.ttft_s
    if slo.tpot_s is not None:
        ok &= np.isnan(tpot) | (tpot <= slo.tpot_s)
    dur = res.iter_end_s - res.iter_start_s
    busy = float(dur.sum())
    kv_mean = float((res.iter_kv * dur).sum() / busy / res.kv_capacity) if busy > 0 else 0.0
    out_tok = float(res.osl.sum())
    tot_tok = out_tok + float(res.isl.sum())
    tp = tpot[~np.isnan(tpot)]
    itl = [weighted_quantile(res.itl_s, res.itl_weight, q) for q in (0.5, 0.9, 0.99)]
    return ServeMetrics(
        requests=len(ttft),
        gpus=gpus,
        duration_s=span,
        ttft_p50_s=_pct(ttft)[0],
        ttft_p90_s=_pct(ttft)[1],
        ttft_p99_s=_pct(ttft)[2],
        tpot_p50_s=_pct(tp)[0],
        tpot_p90_s=_pct(tp)[1],
        tpot_p99_s=_pct(tp)[2],
        itl_p50_s=itl[0],
        itl_p90_s=itl[1],
        itl_p99_s=itl[2],
        e2e_p50_s=_pct(e2e)[0],
        e2e_p90_s=_pct(e2e)[1],
        e2e_p99_s=_pct(e2e)[2],
        mean_ttft_s=float(ttft.mean()),
        mean_tpot_s=float(tp.mean()) if len(tp) else float("nan"),
        mean_wait_s=float((res.admit_s - res.arrival_s).mean()),
        output_tokens_per_s=out_tok / span,
        output_tokens_per_s_per_gpu=out_tok / span / gpus,
        total_tokens_per_s=tot_tok / span,
        total_tokens_per_s_per_gpu=tot_tok / span / gpus,
        goodput_rps=float(ok.sum()) / span,
        goodput_rps_per_gpu=float(ok.sum()) / span / gpus,
        slo_attainment=float(ok.mean()),
        kv_utilisation=kv_mean,
        kv_peak_utilisation=float(res.iter_kv.max() / res.kv_capacity) if len(res.iter_kv) else 0.0,
        kv_capacity_tokens=res.kv_capacity,
        preemptions=res.preemptions,
        recomputed_tokens=res.recomputed_tokens,
        iterations=len(res.iter_end_s),
    )


QUEUE_GROWTH = 2.0  # second-half mean wait allowed over the first half's (stability test)


def queue_stable(waits: Iterable[np.ndarray], slo: SLO, floor_s: float | None = None) -> bool:
    """Every queue is bounded: per queue (waits in arrival order, NaN skipped) the second
    half's mean wait is within ``QUEUE_GROWTH`` times the first half's plus a floor
    (``floor_s``; default 5 % of the TTFT SLO, or 10 ms without one). A finite run at an
    overloaded rate can still meet percentile SLOs while its queue grows without bound; this
    test catches it."""
    if floor_s is None:
        floor_s = 0.05 * slo.ttft_s if slo.ttft_s is not None else 0.01
    for w in waits:
        w = w[~np.isnan(w)]
        if len(w) < 4:
            continue
        h = len(w) // 2
        if float(w[h:].mean()) > QUEUE_GROWTH * float(w[:h].mean()) + floor_s:
            return False
    return True


def run_stable(res: SimResult, slo: SLO) -> bool:
    """A colocated run is stable: neither the time to first token nor the time per output
    token grows from the first half of the requests (by arrival) to the second (floors: 5 %
    of each SLO, or 10 ms / 1 ms without one)."""
    order = np.argsort(res.arrival_s, kind="stable")
    ttft, tpot, _ = request_latencies(res)
    tpot_floor = 0.05 * slo.tpot_s if slo.tpot_s is not None else 0.001
    return queue_stable((ttft[order],), slo) and queue_stable((tpot[order],), slo, tpot_floor)


class Probe:
    """A rate probe's metrics and whether the run was stable; ``meets`` needs both."""

    def __init__(self, metrics: ServeMetrics, stable: bool) -> None:
        self.metrics, self.stable = metrics, stable

    def meets(self, slo: SLO) -> bool:
        return self.stable and self.metrics.meets(slo)
