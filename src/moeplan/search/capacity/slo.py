"""SLO-bound capacity: the one serving figure deployments are ranked by.

**Definition.** The SLO-bound capacity of an engine instance is the largest sustained arrival
rate at which the SLO percentiles (TTFT and TPOT at ``slo.percentile``) hold *in steady
state*, at that rate and at the lower rates checked (:func:`_grid_search`, "every lower
rate": a deployment sized for a load must also meet its SLOs when the load is lighter); per
GPU it is that rate x the mean output length / the instance's GPUs, in output tokens/s per
GPU. ``moeplan plan``, ``moeplan serve-sim``, the report and the JSON all use
:func:`slo_capacity`. Loosening an SLO never lowers it (below, "Monotone in each SLO").

A probe at rate ``r`` (requests/s into one instance) simulates:

- **Round-robin feed.** A deployment of ``replicas`` instances receives one Poisson (or gamma)
  stream at ``replicas x r`` and deals it round-robin; the simulated instance receives every
  ``replicas``-th arrival (:func:`instance_stream`), not a Poisson stream of its own.
- **Probe geometry** (what a capacity search measures). ``slots`` = the requests the
  deployment holds in service at saturation (:func:`in_service`: its running cap or the
  mean requests its KV pool holds; of a P/D deployment, every instance's): by Little's law
  a saturated deployment receives ``slots`` arrivals per request lifetime. **Warm-up
  excluded**: the first ``WARM_LIFETIMES x SLOT_ARRIVALS x slots`` requests are not
  measured. A lifetime of arrivals at rate ``r`` is ``SLOT_ARRIVALS x min(slots, r x
  L(r))``, ``L(r)`` the request lifetime of an engine instance at saturation
  (:func:`saturated_lifetime`: its decode step at ``slots`` sequences, stretched by the
  prefill the arrivals bring; of a P/D deployment none is read: ``slots``). **Measured**:
  ``requests`` requests (the same count and seed for every candidate), and at least
  :data:`WINDOW_LIFETIMES` lifetimes of arrivals; **drain excluded**: arrivals continue
  ``TAIL_LIFETIMES`` lifetimes past the measured ones, so those finish under full load.
  All of it reads the deployment, the workload and the rate, never the SLO, so every SLO
  measures the very same requests at a rate. Why the warm-up is sized at saturation, and
  twice the slots: an engine whose decode step grows with its batch relaxes slowly (a
  longer step holds more requests, which lengthen the step). DeepSeek-V2-Lite on 6 H100,
  P/D 4:1, ISL 2,048 / OSL 256 at 170 req/s: the mean decode time settles after some
  12,000 arrivals, seven times its 1,704 slots; with a warm-up and window of one lifetime
  = the slots, its probes read that slow rise as queue growth from 116 req/s on (capacity
  115 req/s, against 175 with the SLO's lifetime), with twice the slots it is 174.9 under
  TPOT 50 and 100 ms alike. Qwen3-30B-A3B, attn TP2 / MoE TP2 x 4 on 8 H100 (ISL 1,024 /
  OSL 256, TPOT 50 ms) at 22.5 req/s: a warm-up of four of its own lifetimes at that rate
  (826 requests) left the decode time rising 7 % across the window ("queue growth", where
  its capacity is 29.8 req/s); the window and tail need no such length, and
  ``r x L(r)`` keeps a colocated instance's probes near its load (its 596 slots are three
  times what its TPOT-bound batch holds). A run at a given rate (not a capacity search:
  ``serve-sim --rate``, the load sweep) sizes the same counts from the SLO lifetime at
  that rate instead (:func:`lifetime_s`).
- **Horizon** (capacity verdicts): the run stops one SLO lifetime after the last measured
  arrival; a measured request not done by then misses an SLO (its end-to-end time exceeds
  TTFT SLO + output tokens x TPOT SLO) and counts as infinitely late. The simulation is
  causal, so a run stopped later is the same run observed longer.
- **Verdict.** The probe meets the SLOs when both percentiles are within their limits *and*
  the queue is stable over the measured window (:func:`_no_growth`; and, for a capacity
  probe, at most ``slots`` more requests arrived than left between the window's first and
  last arrivals: a queue grown by a deployment's worth is no steady state, however loose
  the SLOs that its short window leaves unmet): an overloaded rate (rho >= 1) does not meet
  the SLOs once the window is long enough to tell its growth from noise.

Arrival gaps are drawn at unit rate and scaled by ``1/r`` (common random numbers: every rate
sees the same request sequence on a scaled clock; longer streams extend shorter ones).

**Search** (:func:`_grid_search`). Rates live on a fixed grid, ``(1 + RATE_TOL)^i``
requests/s, and every :data:`CELL`-th of them is a coarse point (37 % apart). A coarse point
*holds* when it and the :data:`DOWN_CELLS` coarse point below it meet the SLOs ("every lower
rate": down to 0.73 of it). From the coarse point at or below the start (an upper bound of
the capacity), the search walks one coarse point at a time: up to the first that does not
hold, or down to the first that holds; then it bisects that cell over the fine grid (five
runs). The point bracket is two neighbouring grid rates, ``RATE_TOL`` apart.

**Monotone in each SLO** (this module's decision; a property test drives the search with
random verdicts). Take a tighter SLO ``T`` and a looser ``L``. (1) A probe's run does not
depend on the SLO: the geometry above reads none, and the horizon only stops the same run
earlier or later. (2) The verdict on one run is monotone: a percentile within a tighter
limit is within a looser one; a request infinitely late at the later horizon is so at the
earlier; the queue-growth floor grows with the limit (``GROWTH_FLOOR`` x the SLO) and its
other terms, like the count of requests that arrived and left, read no SLO; a stop on a
certain miss (:mod:`moeplan.search.capacity.certain_miss`) is the full run's verdict; the
rates past the proven bound that miss without a run are fewer under ``L`` (the bound is
nondecreasing in each SLO:
:mod:`moeplan.search.capacity.bound`, property-tested). So every rate that meets ``T``
meets ``L``, and so does every coarse point that holds. (3) The walk: let ``a <= b`` be the
start points (the start is the bound), ``j_T`` and ``j_L`` the cells found. If ``b``
holds under ``L``, ``L`` walks up from ``b`` to ``j_L >= b``; ``T`` ends below ``a <= b``
when ``a`` fails, else at its first failure above ``a``, and every point in ``[b, j_T]``
holds under ``T`` hence under ``L``: ``j_L >= j_T``. If ``b`` fails under ``L``, every
point in ``(j_L, b]`` fails under ``L`` hence under ``T``, so ``T``'s walk, up or down,
stops at or below ``j_L``. (4) In cells ``j_T < j_L`` the capacities are ordered by their
cells; in one cell both bisect the same fine points in the same order, and the first
point where they part meets ``L`` only: ``L`` ends at or above it, ``T`` below it. The
walk's ends (:data:`FLOOR_RPS`, :data:`CEILING_RPS`) are fixed rates, not the start's
multiples, so they keep (3). The search's bounds are nondecreasing in each SLO; what the
deployment *is* (a colocated layout's engine knobs, picked by an estimate under the SLO; a
P/D decode pool's running cap, sized at the TPOT SLO) may differ between SLOs, and then the
two capacities are of two deployments.

**Confidence interval.** Requests that share a queue are correlated over a request lifetime,
often as long as a whole measured window, so no interval from one run is honest: the
order-statistic interval of the percentile (independent requests) and batch means within
the window stated 0.2-1.1 % where runs with other seeds differed by 1.5 % (standard
deviation; Qwen3-30B-A3B on 8 H100, 500 requests). The capacity's 95 % interval comes from
:data:`REPLICATIONS` independent arrival streams (:func:`_replicated`: Student t on the
spread of their capacities). Each other stream's capacity is its own crossing of the SLOs,
bracketed from the point's bracket outward (same request count, warm-up and tail as the
point's probes) and narrowed to ``RATE_TOL``; the lower rates of "every lower rate" are
checked on the point's stream only, so the interval is the spread of the crossing (this
module's choice: those checks were a third of the replications' runs). The percentile
levels of one probe
(:func:`_levels`: order statistics, batch means and the window's halves) are kept for
reports. An estimate is *steady* when the
interval's half-width is at most ``CI_TARGET`` of the capacity.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from moeplan.errors import MoeplanError
from moeplan.search.capacity.certain_miss import certain_miss
from moeplan.search.job.fanout import fan_out
from moeplan.serve.engine.run import EngineConfig, Evaluator, SimResult, simulate, tokens_per_step
from moeplan.serve.iteration.model import Batch
from moeplan.serve.metrics import SLO, ServeMetrics, request_latencies, summarize
from moeplan.serve.workload.arrivals import Requests, ServeWorkload, requests_from_rows

DEFAULT_REQUESTS = 1000  # measured requests per probe, plan and serve-sim alike
WARM_LIFETIMES = 2.0  # warm-up: two lifetimes of arrivals (module docstring)
TAIL_LIFETIMES = 1.0  # arrivals kept up one lifetime after the last measured request
SLOT_ARRIVALS = 2.0  # a capacity probe's lifetime of arrivals: twice the slots (docstring)
RATE_TOL = 0.01  # bisection resolution, relative
CI_TARGET = 0.05  # steady when the 95 % interval's half-width is within 5 % of the capacity
Z95 = 1.959963984540054  # two-sided 95 % normal quantile
# The search's grid (module docstring, "Search"): rates (1 + RATE_TOL)^i requests/s, and
# every CELL-th of them a coarse point, 1.01^32 = 1.375 apart. "Every lower rate": an engine
# can miss a TPOT limit at a moderate rate and meet it at a higher one (under SGLang's
# prefill-first scheduler a queue batches prompts into fewer prefill iterations that
# interrupt decoding less), so a coarse point holds only when the DOWN_CELLS coarse point
# below it meets the SLOs too: a capacity in a cell has its cell's base and the point below
# checked, down to 0.73 of the base (this module's choice; a load 27 % below capacity is
# light). A coarse step of 37 % walks a start at twice the capacity down in two runs; with
# 17 % steps and two points below, the searches took two runs more (Qwen3-30B-A3B on 8
# H100, ISL 1,024 / OSL 256, 500 requests).
CELL = 32
DOWN_CELLS = 1
# The walk's ends, requests/s per instance (this module's choice, far outside any rate the
# presets serve: 1e-4 req/s is one request in three hours): below FLOOR_RPS the capacity
# is 0, above CEILING_RPS unbounded. They do not depend on the SLO (module docstring).
FLOOR_RPS = 1e-4
CEILING_RPS = 1e7
# Stability: at rho >= 1 the admission queue grows by about (rho - 1) seconds of waiting per
# second of arrivals, however long it already is; a stable queue's two halves differ by
# noise only. GROWTH_SLOPE = 0.02 flags rho >= ~1.02; GROWTH_FLOOR (1 % of the SLO) ignores
# differences too small to matter. Both are this module's choices, checked by the
# overload and 500-vs-5000-request tests.
GROWTH_SLOPE = 0.02
GROWTH_FLOOR = 0.01
GROWTH_Z = 2.0  # standard errors of the halves' difference: noise, not growth
# A run at a given rate (serve-sim --rate, the load sweep) sizes its window from the SLO
# lifetime, which can be short beside how slowly a busy decode batch drifts: its noise is
# then read from few independent batches, and about 2 % of stable queues show a "growth"
# past GROWTH_Z standard errors (a stationary AR(1) series of neighbour correlation 0.98,
# 400 requests: 2.3 % of 1,000 series). A growth is therefore confirmed over a window twice
# as long before the run is called overloaded (this module's choice): a queue that truly
# grows grows in the longer window too, a chance rise rarely repeats. Found on the load
# sweep of gpt-oss-20b, attn TP2 / MoE TP2 x 8 on 2 x 8 H200: at 106.7 req/s, half its
# capacity, the decode times' rise was 2.03 standard errors and the point read
# "overloaded" while the verdict at the capacity was stable. Capacity probes size their
# window from the deployment (slots) and are not re-run: the capacity search's decision tree
# reads one run per rate.
CONFIRM_WINDOWS = 2
MAX_STEPS = 40  # growths when bracketing a replication's rate
MAX_HALVINGS = 10  # below 1/1024 of the point a replication's capacity is 0
# The measured window spans two lifetimes of arrivals at least (more requests than asked
# when they arrive faster), colocated and pooled deployments alike: the queue-growth verdict
# compares the window's halves, and over a window shorter than a lifetime requests that
# share a queue make it noise (Qwen3-30B-A3B, attn TP2 / MoE TP2 x 4 on 8 H100, 300 measured
# requests: with no floor the capacity fell from 21.1 to 16.8 req/s per instance, "queue
# growth", when the TTFT SLO went from 2 s to 4 s; with two SLO lifetimes, 20.42 and 20.44).
WINDOW_LIFETIMES = 2.0


def lifetime_s(workload: ServeWorkload, slo: SLO) -> float:
    """The request lifetime the SLOs allow: TTFT SLO + mean output tokens x TPOT SLO."""
    if slo.ttft_s is None and slo.tpot_s is None:
        raise MoeplanError("slo (no TTFT and no TPOT limit) must bind one: capacity needs an SLO")
    return (slo.ttft_s or 0.0) + workload.osl.mean * (slo.tpot_s or 0.0)


def in_service(cfg: EngineConfig, workload: ServeWorkload) -> int:
    """The requests one engine instance holds in service at saturation (module docstring,
    "Probe geometry"): its running cap, or the sequences of a mean request (prompt and
    output) its KV pool holds, whichever is fewer; at least 1. It reads the deployment and
    the workload only, never the SLO."""
    per = max(1, round(workload.isl.mean + workload.osl.mean))
    return max(1, min(cfg.max_running, cfg.kv_tokens // per))


Lifetime = Callable[[float], float]  # arrival rate (requests/s) -> a request's lifetime (s)


def saturated_lifetime(cfg: EngineConfig, evaluate: Evaluator, workload: ServeWorkload) -> Lifetime:
    """A mean request's lifetime in one engine instance at a rate ``r``, saturated: its
    prompt's prefill alone (in the engine's chunks) and its output tokens at the decode step
    of :func:`in_service` sequences at the mean context, stretched by the prefill iterations
    the other arrivals bring (a share ``r x`` one prompt's prefill in full chunks of the
    time; all of it: an infinite lifetime). The deployment, the workload and the rate only,
    never the SLO (module docstring, "Probe geometry")."""
    isl, osl = max(1, round(workload.isl.mean)), max(1, round(workload.osl.mean))
    chunk = cfg.chunk_tokens or isl
    q = min(isl, chunk)
    alone = sum(evaluate(Batch(0, 0, ((min(q, isl - s), s + min(q, isl - s)),)))
                for s in range(0, isl, q))  # fmt: skip
    per_chunk = max(1, chunk // isl)
    share = evaluate(Batch(0, 0, ((q, q),) * per_chunk)) / per_chunk * math.ceil(isl / q)
    step = evaluate(Batch(in_service(cfg, workload), isl + osl // 2, ())) / tokens_per_step(
        evaluate
    )

    def life(rate: float) -> float:
        busy = rate * share
        return math.inf if busy >= 1.0 else alone + osl * step / (1.0 - busy)

    return life


def instance_stream(workload: ServeWorkload, rate: float, n: int, replicas: int) -> Requests:
    """The first ``n`` requests one instance receives when a stream at ``replicas x rate`` is
    dealt round-robin over ``replicas`` instances (module docstring)."""
    d = max(1, replicas)
    seed = workload.seed
    rng = np.random.default_rng([seed, 0])
    if workload.arrival == "poisson":
        gaps = rng.exponential(1.0, size=n * d)
    else:
        shape = 1.0 / (workload.cv * workload.cv)
        gaps = rng.gamma(shape, 1.0 / shape, size=n * d)
    t = np.cumsum(gaps)[d - 1 :: d] / (rate * d)
    isl = workload.isl.sample(np.random.default_rng([seed, 1]), n)
    osl = workload.osl.sample(np.random.default_rng([seed, 2]), n)
    return requests_from_rows(t, isl, osl, workload.prefix_hit)


@dataclass(frozen=True, slots=True)
class SteadyProbe:
    """One steady run at ``rate``: the run, its measured window, percentiles at three levels
    (0 = lower order statistic, 1 = point, 2 = upper) and queue stability."""

    rate: float
    res: SimResult
    window: slice
    ttft: tuple[float, float, float]
    tpot: tuple[float, float, float]
    stable: bool
    stopped: bool = False  # stopped on a certain miss: ``meets`` is the full run's, not the rest

    def meets(self, slo: SLO, level: int = 1) -> bool:
        return (
            self.stable
            and (slo.ttft_s is None or self.ttft[level] <= slo.ttft_s)
            and (slo.tpot_s is None or self.tpot[level] <= slo.tpot_s)
        )

    def score(self, slo: SLO, level: int = 1) -> float:
        """log of the largest percentile / limit ratio (<= 0 when the percentiles meet the
        SLOs); inf when the queue grows: what the capacity search interpolates in."""
        if not self.stable:
            return math.inf
        ratios = [
            v[level] / lim
            for v, lim in ((self.ttft, slo.ttft_s), (self.tpot, slo.tpot_s))
            if lim is not None
        ]
        top = max(ratios)
        return math.log(top) if top > 0 else -math.inf

    def limit(self, slo: SLO) -> str:
        """What a failing probe misses first: the queue, the TTFT or the TPOT percentile."""
        if not self.stable:
            return "queue growth (rho >= 1)"
        ttft = 0.0 if slo.ttft_s is None else self.ttft[1] / slo.ttft_s
        tpot = 0.0 if slo.tpot_s is None else self.tpot[1] / slo.tpot_s
        return "TTFT" if ttft >= tpot else "TPOT"


BATCHES = 10  # batch means: contiguous batches of the measured window (arrival order)


def _batch_means(x: np.ndarray) -> np.ndarray:
    """Means of :data:`BATCHES` contiguous batches of ``x`` (fewer when ``x`` is short)."""
    b = min(BATCHES, len(x) // 4)
    if b < 2:
        return np.asarray([float(np.mean(x))]) if len(x) else np.zeros(0)
    k = len(x) // b
    return x[: b * k].reshape(b, k).mean(axis=1)


def _inflation(m: np.ndarray) -> float:
    """Variance inflation of the batch means' average from their lag-1 correlation (AR(1):
    ``(1 + r) / (1 - r)``, r capped at 0.9): neighbouring batches share a queue."""
    if len(m) < 3:
        return 1.0
    d = m - m.mean()
    den = float(np.dot(d, d))
    r = 0.0 if den <= 0 else min(0.9, max(0.0, float(np.dot(d[:-1], d[1:])) / den))
    return (1.0 + r) / (1.0 - r)


def _tau(x: np.ndarray) -> float:
    """Integrated autocorrelation time of ``x`` (arrival order) by batch means: the variance
    of the batch means x batch size / the variance of ``x``, inflated by the batch means'
    own correlation; at least 1 (independent requests)."""
    m = _batch_means(x)
    var = float(np.var(x))
    if len(m) < 2 or var <= 0:
        return 1.0
    k = len(x) // len(m)
    return max(1.0, k * float(np.var(m, ddof=1)) * _inflation(m) / var)


def _no_growth(x: np.ndarray, t: np.ndarray, limit_s: float | None) -> bool:
    """No queue growth over the measured window: the second half's mean of ``x`` (seconds,
    by arrival time ``t``) exceeds the first half's by at most the largest of
    ``GROWTH_SLOPE`` x the time between the halves' mean arrivals, ``GROWTH_FLOOR`` x the SLO,
    and ``GROWTH_Z`` standard errors of the difference (the noise of a stable queue; from
    batch means, since requests that share a queue are correlated)."""
    ok = ~np.isnan(x)
    x, t = x[ok], t[ok]
    if len(x) < 4:
        return True
    h = len(x) // 2
    a, b = x[:h], x[h:]
    if np.isinf(x).any():  # a request not done at the horizon: the queue outgrew the window
        return False
    rise = float(b.mean() - a.mean())
    dt = float(t[h:].mean() - t[:h].mean())
    se = float(np.sqrt(_tau(x) * (a.var() / len(a) + b.var() / len(b))))
    floor = GROWTH_FLOOR * (limit_s if limit_s is not None else float(np.mean(x)))
    return rise <= max(floor, GROWTH_SLOPE * dt, GROWTH_Z * se)


BATCH_MIN = 20  # requests per batch at least when batching percentiles (p90 of 20: 2 above)


def _levels(x: np.ndarray, p: float) -> tuple[float, float, float]:
    """Lower bound, point percentile and upper bound of the ``p``-th percentile, 95 %: the
    widest of (a) the order-statistic interval (independent requests), (b) batch means of
    the percentile — the percentiles of up to :data:`BATCHES` contiguous batches (arrival
    order, :data:`BATCH_MIN` requests at least), point +/- z x their standard error inflated
    by their lag-1 correlation (requests that share a queue are correlated; batch means is
    the standard remedy) — and (c) the percentiles of the window's two halves."""
    x = x[~np.isnan(x)]
    n = len(x)
    if n == 0:
        return (0.0, 0.0, 0.0)
    s = np.sort(x)
    q = p / 100.0
    half = Z95 * math.sqrt(n * q * (1.0 - q))
    lo_rank, hi_rank = math.floor(n * q - half), math.ceil(n * q + half)
    # a distribution-free bound needs the rank inside the sample (p90: n >= 35)
    low = float(s[lo_rank - 1]) if lo_rank >= 1 else 0.0
    high = float(s[hi_rank - 1]) if hi_rank <= n else math.inf
    with np.errstate(invalid="ignore"):  # late requests are inf: a percentile may be nan
        halves = [float(np.percentile(h, p)) for h in (x[: n // 2], x[n // 2 :]) if len(h)]
        point = float(np.percentile(x, p))
        b = min(BATCHES, n // BATCH_MIN)
        if b >= 2 and math.isfinite(point):
            k = n // b
            m = np.percentile(x[: b * k].reshape(b, k), p, axis=1)
            if np.isfinite(m).all():
                se = float(np.std(m, ddof=1)) * math.sqrt(_inflation(m) / b)
                low, high = min(low, point - Z95 * se), max(high, point + Z95 * se)
            else:
                high = math.inf
    return min([low, *halves]), point, max([high, *halves])


Runner = Callable[[Requests, float | None], SimResult]  # requests, horizon (s) -> run


def steady_probe(
    cfg: EngineConfig | None,
    evaluate: Evaluator | None,
    workload: ServeWorkload,
    slo: SLO,
    rate: float,
    *,
    requests: int,
    replicas: int = 1,
    slots: int | None = None,
    life_s: Lifetime | None = None,
    runner: Runner | None = None,
    horizon: bool = False,
    window_lifetimes: float = 0.0,
    stop_on_miss: bool = False,
    confirm: bool = True,
) -> SteadyProbe:
    """Simulate one instance at ``rate`` requests/s (module docstring) and measure it.
    ``slots``: the deployment's requests in service at saturation (:func:`in_service`); the
    warm-up is sized from them, the least window and the tail from them or ``rate x
    life_s(rate)`` when fewer (``life_s``: its saturated request lifetime,
    :func:`saturated_lifetime`; module docstring, "Probe geometry"): every SLO measures the
    very same requests.
    None (a run at a given rate, not a capacity search): ``rate`` x the SLO lifetime instead.
    ``runner`` simulates a deployment that is not one engine (P/D pools: the user's view of
    :func:`moeplan.serve.pools.pd.simulate_pd`); default: :func:`simulate` with ``cfg``.
    ``horizon``: stop the engine one SLO lifetime after the last measured arrival (a verdict
    only: a measured request not done by then misses an SLO — its end-to-end time exceeds
    TTFT SLO + output tokens x TPOT SLO — and counts as infinitely late; a looser SLO's
    horizon is later, and the run up to the earlier one is the same run).
    ``window_lifetimes``: measure at least that many lifetimes of arrivals (more than
    ``requests`` when they arrive faster): a queue that grows by a few percent of the load
    per second shows over a window of a lifetime, not over a fifth of one. ``stop_on_miss``
    (one engine, open loop): stop once a miss is certain
    (:mod:`moeplan.search.capacity.certain_miss`; a verdict only: ``meets`` is the full
    run's, the percentiles are not). ``confirm``: a run at a given rate (``slots`` None)
    whose queue grew is run again over :data:`CONFIRM_WINDOWS` times its window, and that
    run is the answer (growth is declared only when both windows show it)."""
    life = lifetime_s(workload, slo)
    if slots is None:  # a run at a given rate: the SLO lifetime's arrivals at this rate
        per_life = warm_life = rate * life
    else:  # a capacity probe's: the deployment's, never the SLO's (module docstring)
        held = slots if life_s is None else min(slots, rate * life_s(rate))
        per_life, warm_life = SLOT_ARRIVALS * max(1.0, held), SLOT_ARRIVALS * slots
    warm = math.ceil(WARM_LIFETIMES * warm_life)
    tail = math.ceil(TAIL_LIFETIMES * per_life)
    requests = max(requests, math.ceil(window_lifetimes * per_life))
    reqs = instance_stream(workload, rate, warm + requests + tail, replicas)
    win = slice(warm, warm + requests)
    stop = float(reqs.arrival_s[win.stop - 1]) + life if horizon else None
    if runner is None:
        assert cfg is not None and evaluate is not None
        miss = certain_miss(reqs, win, slo) if stop_on_miss and not reqs.closed else None
        res = simulate(reqs, cfg, evaluate, horizon_s=stop, stop=miss)
    else:
        miss, res = None, runner(reqs, stop)
    ttft, tpot, _ = request_latencies(res)
    late = np.isnan(res.finish_s[win])
    tt = np.where(np.isnan(res.first_token_s[win]), np.inf, ttft[win])
    tp = np.where(late & (res.osl[win] > 1), np.inf, tpot[win])
    arr = res.arrival_s[win]
    decode_limit = None if slo.tpot_s is None else slo.tpot_s * workload.osl.mean
    wait = np.where(np.isnan(res.admit_s[win]), np.inf, res.admit_s[win] - arr)
    decode = np.where(late, np.inf, res.finish_s[win] - res.first_token_s[win])
    stable = _no_growth(wait, arr, slo.ttft_s) and _no_growth(decode, arr, decode_limit)
    if slots is not None and stable:  # more came than left: a queue past the slots' worth
        fin = res.finish_s
        left = int(np.count_nonzero((fin > arr[0]) & (fin <= arr[-1])))
        stable = len(arr) - 1 - left <= slots
    if slots is None and not stable and confirm:  # a run at a given rate: confirm growth
        return steady_probe(
            cfg, evaluate, workload, slo, rate, requests=CONFIRM_WINDOWS * requests,
            replicas=replicas, runner=runner, horizon=horizon, stop_on_miss=stop_on_miss,
            confirm=False,
        )  # fmt: skip
    p = slo.percentile
    stopped = miss is not None and bool(np.isnan(res.finish_s[win]).any()) and not stable
    return SteadyProbe(rate, res, win, _levels(tt, p), _levels(tp, p), stable, stopped)


#: What more load breaks first (:meth:`SteadyProbe.limit`), in the words the output prints.
LIMIT_WORDS = {"TTFT": "the TTFT SLO", "TPOT": "the TPOT SLO", "none": "no SLO at the rates tried"}


def limit_words(limited_by: str, pool: str | None = None) -> str:
    """What limits a deployment's SLO capacity, as every part of the output says it (the
    verdict, the tables, the report, the JSON's ``limits``): what more load breaks first
    (:meth:`SteadyProbe.limit`: the TTFT or TPOT SLO, or the queue), and for a
    disaggregated deployment the pool whose throughput its rate is matched to."""
    first = LIMIT_WORDS.get(limited_by, limited_by)
    return first if pool is None else f"{first}; the rate is set by its {pool}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Capacity:
    """SLO-bound capacity of one instance (requests/s into it) with its 95 % interval."""

    rate_rps: float
    point_high_rps: float  # the smallest rate found to miss the SLOs (bisection bracket)
    low_rps: float
    high_rps: float
    requests: int
    seed: int
    replicas: int
    limited_by: str
    probes: int
    boundable: bool = True
    """One run's requests can bound the SLO percentile (its distribution-free 95 % upper
    order statistic lies inside the sample: p90 needs 35 requests)."""

    @property
    def ci_rel(self) -> float:
        """Half-width of the 95 % interval over the capacity (inf when the capacity is 0)."""
        if self.rate_rps <= 0:
            return math.inf
        return 0.5 * (self.high_rps - self.low_rps) / self.rate_rps

    @property
    def steady(self) -> bool:
        return self.ci_rel <= CI_TARGET

    def per_gpu(self, osl_mean: float, gpus: int) -> float:
        """Output tokens/s per GPU at the capacity."""
        return self.rate_rps * osl_mean / gpus

    def to_dict(self, osl_mean: float, gpus: int) -> dict[str, Any]:
        return {
            "definition": "largest steady arrival rate meeting the SLO percentiles "
            "(warm-up and drain excluded, round-robin feed) x output tokens / GPUs",
            "rate_rps_per_instance": self.rate_rps,
            "ci95_rps_per_instance": [self.low_rps, self.high_rps],
            "ci95_half_width_rel": self.ci_rel,
            "steady": self.steady,
            "percentile_boundable": self.boundable,
            "output_tokens_per_s_per_gpu": self.per_gpu(osl_mean, gpus),
            "measured_requests": self.requests,
            "seed": self.seed,
            "round_robin_replicas": self.replicas,
            "limited_by": self.limited_by,
            "probes": self.probes,
        }


Verdict = Callable[[float], tuple[bool, float]]  # rate -> (meets the SLOs, score)


def _bracket(
    ok: Verdict, lo: float, hi: float, step: float = 1.0, cap: float = math.inf
) -> tuple[float, float]:
    """``(lo, hi)`` with ``ok(lo)`` (or lo = 0) and not ``ok(hi)``, ``hi - lo <= RATE_TOL lo``;
    starts from a guess ``lo < hi`` that need not hold: moves down from ``lo`` by a factor
    ``1 + step`` (then ``1 + 4 step``, ... at most 2) until ``ok`` holds, or up from ``hi``
    the same way until it fails, then narrows (:func:`_narrow`). ``step = 1`` halves and
    doubles; a small step suits a bracket known to be near (the interval's ends). ``cap``: an
    upper bound of the capacity proven without simulation (:mod:`moeplan.search.capacity.bound`); an
    upward step that would pass it stops just above it, where the SLOs must miss (and if they
    do not, the steps go on as before: the bracket never trusts the bound blindly)."""
    floor, s = lo / 2.0**MAX_HALVINGS, step
    while not ok(lo)[0]:
        if lo < floor:
            return 0.0, hi
        lo, hi = lo / (1.0 + s), lo
        s = min(1.0, 4.0 * s)
    s = max(step, hi / lo - 1.0)
    top = cap * (1.0 + RATE_TOL)
    for _ in range(MAX_STEPS):
        if not ok(hi)[0]:
            break
        lo, hi = hi, hi * (1.0 + s)
        if lo < top < hi:
            hi = top
        s = min(1.0, 4.0 * s)
    else:
        return lo, math.inf
    return _narrow(ok, lo, hi)


def _narrow(ok: Verdict, lo: float, hi: float) -> tuple[float, float]:
    """Shrink a bracket (``ok(lo)``, not ``ok(hi)``) to ``RATE_TOL lo``: the next rate is the
    secant root of the probes' scores (:meth:`SteadyProbe.score`, smooth in the rate under
    common random numbers) kept ``0.45 RATE_TOL lo`` inside the bracket, so a good root
    closes it in two runs; a step that does not halve the bracket, or a score that is not
    finite (a growing queue), makes the next step a bisection: never more than twice the
    runs of bisection alone."""
    bisect = False
    while hi - lo > RATE_TOL * lo:
        (_, f_lo), (_, f_hi) = ok(lo), ok(hi)  # both cached by the caller
        width, pad = hi - lo, 0.45 * RATE_TOL * lo
        if not bisect and math.isfinite(f_lo) and math.isfinite(f_hi) and f_hi > f_lo:
            mid = min(max(lo + width * -f_lo / (f_hi - f_lo), lo + pad), hi - pad)
        else:
            mid = 0.5 * (lo + hi)
        good = ok(mid)[0]
        lo, hi = (mid, hi) if good else (lo, mid)
        bisect = not bisect and hi - lo > 0.5 * width
    return lo, hi


def _grid_rate(i: int) -> float:
    """Rate ``i`` of the search's grid: ``(1 + RATE_TOL)^i`` requests/s (module docstring,
    "Search")."""
    return (1.0 + RATE_TOL) ** i


def _grid_index(rate: float) -> int:
    """The grid's largest index whose rate is at most ``rate``."""
    i = math.floor(math.log(rate) / math.log1p(RATE_TOL))
    while _grid_rate(i + 1) <= rate:
        i += 1
    while _grid_rate(i) > rate:
        i -= 1
    return i


Meets = Callable[[float], bool]  # rate -> meets the SLOs (a run's verdict)


def _grid_search(
    meets: Meets,
    start: float,
    cap: float = math.inf,
    prefetch: Callable[[list[float]], None] | None = None,
) -> tuple[float, float]:
    """The point bracket ``(lo, hi)`` of the capacity (module docstring, "Search"): a walk
    over the coarse points, one :data:`CELL` at a time, from the coarse point at or below
    ``start`` up to the first that fails (or down to the first that holds), where a coarse
    point holds when its rate and the :data:`DOWN_CELLS` coarse points below it meet the
    SLOs; then a bisection of the cell found over the fine grid. ``cap``: a rate above
    ``cap x (1 + RATE_TOL)`` misses without a run (an upper bound of the capacity proven
    without simulation, nondecreasing in each SLO). ``prefetch``: runs a coarse point's
    lower checks before they are read (side by side when the caller allows it; the same
    runs either way). ``lo = 0`` when no coarse point above :data:`FLOOR_RPS` holds;
    ``hi = inf`` when every one up to :data:`CEILING_RPS` does."""
    top = cap * (1.0 + RATE_TOL)

    def fine(i: int) -> bool:
        r = _grid_rate(i)
        return r <= top and meets(r)

    def coarse(k: int) -> bool:
        if not fine(k * CELL):
            return False
        lower = [(k - d) * CELL for d in range(1, DOWN_CELLS + 1)]
        if prefetch is not None:
            prefetch([_grid_rate(i) for i in lower if _grid_rate(i) <= top])
        return all(fine(i) for i in lower)

    bottom = _grid_index(FLOOR_RPS) // CELL + 1
    ceiling = _grid_index(CEILING_RPS) // CELL
    k = min(max(_grid_index(max(start, FLOOR_RPS)) // CELL, bottom), ceiling)
    if coarse(k):  # up to the first coarse point that fails
        while True:
            if k >= ceiling:
                return _grid_rate(k * CELL), math.inf
            if not coarse(k + 1):
                break
            k += 1
    else:  # down to the first that holds
        while True:
            k -= 1
            if k < bottom:
                return 0.0, _grid_rate((k + 1) * CELL)
            if coarse(k):
                break
    lo, hi = k * CELL, (k + 1) * CELL  # fine(lo) holds, fine(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fine(mid) else (lo, mid)
    return _grid_rate(lo), _grid_rate(hi)


@dataclass(frozen=True, kw_only=True, slots=True)
class CapacitySearch:
    """How :func:`slo_capacity` searches one instance's capacity (module docstring).

    ``guess_rps`` picks the walk's first coarse point (:func:`_grid_search`); the capacity is
    monotone in each SLO when it is nondecreasing in each SLO (an upper bound of the
    capacity from :mod:`moeplan.search.capacity.bound` is). ``requests`` is the measured
    request count of every probe; ``interval=False`` skips the confidence-interval searches
    (low = high = the point); ``known`` = a point bracket ``(lo, hi)`` found before (same
    workload, requests and slots), kept. ``slots`` and ``life_s``: the deployment's requests
    in service and request lifetime at saturation, sizing every probe (:func:`steady_probe`;
    default :func:`in_service` and :func:`saturated_lifetime` of the engine; a runner's
    deployment gives its slots, and its probes then read no lifetime). ``full=False`` skips
    the run at capacity to its end (no probe returned). ``window_lifetimes``: the shortest
    measured window, in lifetimes of arrivals (:func:`steady_probe`). ``cap_rps``: an upper
    bound of the capacity proven without simulation, nondecreasing in each SLO: rates past
    it miss without a run (:func:`_grid_search`)."""

    guess_rps: float
    requests: int = DEFAULT_REQUESTS
    interval: bool = True
    known: tuple[float, float] | None = None
    slots: int | None = None
    life_s: Lifetime | None = None
    full: bool = True
    window_lifetimes: float = 0.0
    cap_rps: float = math.inf


def slo_capacity(
    cfg: EngineConfig | None,
    evaluate: Evaluator | None,
    workload: ServeWorkload,
    slo: SLO,
    search: CapacitySearch,
    *,
    replicas: int = 1,
    runner: Runner | None = None,
    cache: dict | None = None,
) -> tuple[Capacity, SteadyProbe | None]:
    """The capacity of one instance (module docstring) searched as ``search`` says, and the
    probe at it (None when no rate meets the SLOs). ``replicas``: the instances the arrivals
    are dealt round-robin to (:func:`instance_stream`); ``runner``: as :func:`steady_probe`.
    ``cache``: the probes of an earlier call with the same workload, requests, replicas and
    slots (the same runs), reused and extended; keyed by ``(rate, slots)``."""
    requests, window_lifetimes, cap_rps = search.requests, search.window_lifetimes, search.cap_rps
    probes: dict[tuple, SteadyProbe] = {} if cache is None else cache  # type: ignore[assignment]
    slots, life = search.slots, search.life_s
    if slots is None:
        assert cfg is not None, "a runner's deployment states its slots"
        slots = in_service(cfg, workload)
    if life is None and runner is None and cfg is not None and evaluate is not None:
        life = saturated_lifetime(cfg, evaluate, workload)
    g = max(search.guess_rps, FLOOR_RPS)

    def probe_at(wl: ServeWorkload, r: float, stop: bool = False) -> SteadyProbe:
        return steady_probe(
            cfg, evaluate, wl, slo, r, requests=requests, replicas=replicas, slots=slots,
            life_s=life, runner=runner, horizon=True, window_lifetimes=window_lifetimes,
            stop_on_miss=stop and runner is None,
        )  # fmt: skip

    def prober(
        wl: ServeWorkload, probes: dict, stop: bool = False
    ) -> Callable[[float], SteadyProbe]:
        def probe(r: float) -> SteadyProbe:
            if (r, slots) not in probes:
                probes[r, slots] = probe_at(wl, r, stop)
            return probes[r, slots]

        return probe

    def prefetch(rates: list[float]) -> None:
        todo = [r for r in rates if (r, slots) not in probes]
        for r, p in zip(
            todo, fan_out([partial(probe_at, workload, r, True) for r in todo]), strict=True
        ):
            probes[r, slots] = p

    def verdict_of(probe: Callable[[float], SteadyProbe]) -> Verdict:
        def verdict(r: float) -> tuple[bool, float]:
            p = probe(r)
            return p.meets(slo), p.score(slo)

        return verdict

    probe = prober(workload, probes, stop=True)
    if search.known is not None:
        lo, hi = search.known
    else:
        lo, hi = _grid_search(lambda r: probe(r).meets(slo), g, cap_rps, prefetch)
    low, high = lo, hi
    if search.interval and lo > 0:
        # another stream's crossing near the point (module docstring, "Confidence interval")
        top = max(hi, lo * (1.0 + RATE_TOL)) if math.isfinite(hi) else lo * (1.0 + RATE_TOL)

        def replica(wl: ServeWorkload) -> float:
            return _bracket(verdict_of(prober(wl, {})), lo, top, REPLICA_STEP, cap_rps)[0]

        low, high = _replicated(replica, workload, lo)
    limited = "none"
    if math.isfinite(hi):  # what more load breaks first, read on a run not stopped early
        at = probe(hi)
        limited = (probe_at(workload, hi) if at.stopped else at).limit(slo)
    cap = Capacity(
        rate_rps=lo,
        point_high_rps=hi,
        low_rps=low,
        high_rps=high if math.isfinite(high) else lo,
        requests=_measured(probe(lo if lo > 0 else hi)),
        seed=workload.seed,
        replicas=replicas,
        limited_by=limited,
        probes=sum(1 for k in probes if k[0] != "full"),
        boundable=percentile_boundable(requests, slo.percentile),
    )
    if not search.full:
        return cap, None
    run = None  # the run at capacity again, to its end: its metrics are reported
    if lo > 0 and ("full", lo, slots) in probes:
        run = probes["full", lo, slots]  # type: ignore[index]
    elif lo > 0:
        run = probes["full", lo, slots] = steady_probe(  # type: ignore[index]
            cfg,
            evaluate,
            workload,
            slo,
            lo,
            requests=requests,
            replicas=replicas,
            slots=slots,
            life_s=life,
            runner=runner,
            window_lifetimes=window_lifetimes,
        )
    return cap, run


def _measured(p: SteadyProbe) -> int:
    """The requests a probe measured (its window)."""
    return p.window.stop - p.window.start


def percentile_boundable(n: int, p: float) -> bool:
    """Whether one run's ``n`` measured requests can bound the ``p``-th percentile: its
    distribution-free 95 % upper order statistic, ``ceil(n q + z sqrt(n q (1 - q)))``, must
    lie inside the sample (p90 needs 35 requests, p99 381)."""
    q = p / 100.0
    return math.ceil(n * q + Z95 * math.sqrt(n * q * (1.0 - q))) <= n


REPLICATIONS = 4  # independent streams (seeds) behind the capacity's interval
REPLICA_STEP = 2.0 * RATE_TOL  # a replication's first steps from the point's bracket
T975 = 3.182  # Student t, 97.5 % quantile, 3 degrees of freedom (REPLICATIONS - 1; t table)


def _replicated(
    capacity_of: Callable[[ServeWorkload], float], workload: ServeWorkload, point: float
) -> tuple[float, float]:
    """95 % interval of one run's capacity ``point`` by independent replications: the
    capacities of ``REPLICATIONS - 1`` more arrival streams (seeds ``seed + 1000 i``, same
    request count), ``point +/- t x`` their sample standard deviation (with ``point``): the
    spread of the estimate itself, whatever correlates the requests of one run (the
    batch-means and order-statistic intervals of one run stated 0.2-1.1 % where seeds
    differed by 1.5 % sd). The streams are independent searches, run side by side when the
    caller allows it (:func:`moeplan.search.job.fanout.fan_out`)."""
    seeds = [replace(workload, seed=workload.seed + 1000 * i) for i in range(1, REPLICATIONS)]
    caps = [point] + fan_out([partial(capacity_of, wl) for wl in seeds])
    sd = float(np.std(caps, ddof=1))
    return max(0.0, point - T975 * sd), point + T975 * sd


def window_metrics(p: SteadyProbe, gpus: int, slo: SLO) -> ServeMetrics:
    """Metrics of a probe's measured requests, per instance and per GPU. Throughput of a
    stable queue is the steady one: the arrival rate x tokens per request (it serves what
    arrives). An unstable queue serves less than arrives, so its throughput is what the run
    served (:func:`_served_metrics`), never the offered load."""
    r, w = p.res, p.window
    sub = replace(
        r,
        arrival_s=r.arrival_s[w],
        admit_s=r.admit_s[w],
        first_token_s=r.first_token_s[w],
        finish_s=r.finish_s[w],
        isl=r.isl[w],
        osl=r.osl[w],
    )
    m = summarize(sub, gpus, slo)
    if not p.stable:
        return _served_metrics(p, m, gpus)
    n = max(1, m.requests)
    out_tok = float(sub.osl.sum()) / n * p.rate
    tot_tok = out_tok + float(sub.isl.sum()) / n * p.rate
    good = m.slo_attainment * p.rate
    return replace(
        m,
        duration_s=m.requests / p.rate,
        output_tokens_per_s=out_tok,
        output_tokens_per_s_per_gpu=out_tok / gpus,
        total_tokens_per_s=tot_tok,
        total_tokens_per_s_per_gpu=tot_tok / gpus,
        goodput_rps=good,
        goodput_rps_per_gpu=good / gpus,
    )


def _served_metrics(p: SteadyProbe, m: ServeMetrics, gpus: int) -> ServeMetrics:
    """``m`` (the window's metrics) with the throughput the run served: the tokens of every
    request that completed between the first and the last completion of the measured window,
    over that interval (the engine's own completions while the window's requests were in
    service, so neither the warm-up nor the drain after the last arrival dilutes it)."""
    r = p.res
    fin = r.finish_s[p.window]
    fin = fin[np.isfinite(fin)]
    t0, t1 = (float(fin.min()), float(fin.max())) if len(fin) else (0.0, 0.0)
    done = np.isfinite(r.finish_s) & (r.finish_s > t0) & (r.finish_s <= t1)
    span = t1 - t0
    if span <= 0:  # too few completions for an interval: the whole run's completions
        done = np.isfinite(r.finish_s)
        span = float(np.nanmax(r.finish_s) - r.arrival_s.min()) if done.any() else math.nan
    out_tok = float(r.osl[done].sum()) / span
    tot_tok = out_tok + float(r.isl[done].sum()) / span
    good = m.slo_attainment * float(done.sum()) / span
    return replace(
        m,
        duration_s=span,
        output_tokens_per_s=out_tok,
        output_tokens_per_s_per_gpu=out_tok / gpus,
        total_tokens_per_s=tot_tok,
        total_tokens_per_s_per_gpu=tot_tok / gpus,
        goodput_rps=good,
        goodput_rps_per_gpu=good / gpus,
    )
