"""Service metrics of MixServe §III-B4/§III-B5: M/M/1 queueing (Eq. 7), TTFT (Eq. 9),
ITL (Eq. 10) and throughput (Eq. 11), from the per-step service times of Eq. 6.

Departures from the paper (it mixes units here):
- Eq. 7 takes an arrival rate in tokens/s against ``mu = 1/dt_svc``. We take the request
  arrival rate ``rate`` (req/s, the CLI's ``--rate``) and serve requests in batches of ``b``:
  one batch occupies the server for ``dt_prf + L_out * dt_dec``, so ``mu = b / that``
  requests/s and ``rho = rate / mu``. ``rho >= 1`` is reported as unstable (``W_q = inf``).
- Eq. 11 is the rate of one request; the batch serves ``b`` of them at once, so the system
  throughput is ``b`` times Eq. 11 (tokens/s, whole deployment). When unstable the server
  is saturated: throughput is its capacity ``b (L_in + L_out) / busy`` and TTFT is ``inf``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moeplan.errors import require


@dataclass(frozen=True, kw_only=True, slots=True)
class ServiceMetrics:
    """Predicted service metrics of one deployment (seconds, tokens/s)."""

    ttft_s: float
    itl_s: float
    throughput_tokens_per_s: float
    wait_s: float
    rho: float | None
    stable: bool


def mm1_wait(arrival: float, service_rate: float) -> float:
    """Eq. 7: expected M/M/1 queueing delay; ``inf`` when ``rho >= 1``."""
    require(arrival >= 0, f"rate ({arrival}) must be >= 0")
    require(service_rate > 0, f"service rate ({service_rate}) must be > 0")
    if arrival >= service_rate:
        return math.inf
    return arrival / (service_rate * (service_rate - arrival))


def service_metrics(
    *, prefill_s: float, decode_s: float, batch: int, isl: int, osl: int, rate: float | None
) -> ServiceMetrics:
    """Eqs. 7, 9-11 from ``prefill_s`` (Eq. 6 at s = L_in) and ``decode_s`` (s = 1)."""
    require(batch >= 1, f"batch ({batch}) must be >= 1")
    require(prefill_s > 0 and decode_s > 0, f"service times ({prefill_s}, {decode_s}) must be > 0")
    busy = prefill_s + osl * decode_s
    rho: float | None = None
    wait = 0.0
    if rate is not None:
        mu = batch / busy
        rho = rate / mu
        wait = mm1_wait(rate, mu)
    stable = math.isfinite(wait)
    ttft = wait + prefill_s
    # unstable: the server runs saturated, so it delivers its capacity while TTFT diverges
    throughput = batch * (isl + osl) / ((wait if stable else 0.0) + busy)
    return ServiceMetrics(
        ttft_s=ttft,
        itl_s=decode_s,
        throughput_tokens_per_s=throughput,
        wait_s=wait,
        rho=rho,
        stable=stable,
    )
