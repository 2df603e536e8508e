"""Serving workloads: request arrivals and prompt/output length distributions, seeded.

- Arrivals: ``poisson`` (exponential gaps at ``rate``), ``gamma`` (bursty: gamma gaps with
  coefficient of variation ``cv``; cv = 1 is Poisson), or rows given by the caller
  (:func:`requests_from_rows`, e.g. read from a file by the CLI). A *closed* workload
  (``concurrency`` set, no rate) models that many clients, each sending its next request
  ``think`` seconds after its previous one finishes (see :mod:`moeplan.serve.engine.run`). With
  ``think_s = 0`` (the default) every client sends at time 0 and again the instant its request
  finishes: SGLang's ``bench_serving.py --max-concurrency`` with its default
  ``--request-rate inf`` (a semaphore over requests all due at once). With fixed lengths such a
  run stays in lockstep (all clients finish and resend together), as the benchmark does. With
  ``think_s > 0`` think times are exponential with that mean (an interactive client
  population): each client's first request comes after one think time too (staggered start),
  so clients drift apart; the run then obeys the interactive response-time law
  ``clients = throughput x (mean latency + think_s)``.
- Lengths: ``fixed``, ``uniform`` on ``[low, high]``, ``lognormal`` with median ``median`` and
  shape ``sigma`` clipped to ``[low, high]``. ``mean`` is always the distribution's mean (for
  a lognormal: of the clipped distribution, in closed form, rounded to a whole token), so
  every figure priced per token (output tokens/s = rate x mean output length) means one thing.
- ``prefix_hit``: fraction of every prompt found in the prefix cache (occupies KV, is attended
  to, is not prefilled).

Arrival times are generated for rate 1 and divided by ``rate``, so the same seed at two
rates gives the same request sequence on a scaled clock (common random numbers: the rate
searches of :mod:`moeplan.search.colocated.evaluate` compare like with like). That makes each request's
TTFT monotone in the rate for a server that takes one request at a time (Lindley's
recursion), but not for a batching engine: at a higher rate a request can share a prefill
iteration it would otherwise have waited behind, so a TTFT percentile can dip by a few
per cent between nearby rates (46 % of 1,500 requests got a lower TTFT from 18.6 to
18.9 req/s on DeepSeek-V2-Lite, one H100, chunk 8,192), and only its trend rises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from moeplan.errors import MoeplanError, require

ARRIVALS = ("poisson", "gamma")
LENGTH_KINDS = ("fixed", "uniform", "lognormal")


@dataclass(frozen=True, kw_only=True, slots=True)
class LengthDist:
    """Token-count distribution (see module docstring)."""

    kind: str = "fixed"
    mean: int = 1024  # a lognormal's is derived from median, sigma and the clip
    low: int = 1
    high: int = 0  # 0: no upper clip for lognormal, ``mean`` for fixed
    sigma: float = 0.5
    median: int = 0  # lognormal only: the median of the unclipped distribution

    def __post_init__(self) -> None:
        require(
            self.kind in LENGTH_KINDS, f"length.kind ({self.kind!r}) must be one of {LENGTH_KINDS}"
        )
        require(self.mean >= 1, f"length.mean ({self.mean}) must be >= 1")
        require(self.low >= 1, f"length.low ({self.low}) must be >= 1")
        require(
            self.high == 0 or self.high >= self.low,
            f"length.high ({self.high}) must be >= low ({self.low})",
        )
        if self.kind == "uniform":
            require(self.high >= self.low, f"length.high ({self.high}) must be set for uniform")
        require(self.sigma > 0, f"length.sigma ({self.sigma}) must be positive")
        if self.kind == "lognormal":
            require(self.median >= 1, f"length.median ({self.median}) must be >= 1 for lognormal")
            mean = min(float(MAX_LENGTH), self.expected())  # past every context: the cap
            object.__setattr__(self, "mean", max(1, round(mean)))

    def expected(self) -> float:
        """The exact mean of the distribution (a lognormal's clipped to ``[low, high]``:
        ``E[clip(X)] = low P(X<low) + high P(X>high) + median e^(s^2/2) [Phi(b - s) - Phi(a - s)]``
        with ``a, b`` the standardized log-bounds)."""
        if self.kind == "fixed":
            return float(self.mean)
        if self.kind == "uniform":
            return (self.low + self.high) / 2
        mu, s = math.log(self.median), self.sigma
        a = (math.log(self.low) - mu) / s
        b = (math.log(self.high) - mu) / s if self.high else math.inf
        body = self.median * math.exp(s * s / 2) * (_phi(b - s) - _phi(a - s))
        return self.low * _phi(a) + (self.high * (1 - _phi(b)) if self.high else 0.0) + body

    @classmethod
    def parse(cls, text: str) -> LengthDist:
        """``"512"``, ``"fixed:512"``, ``"uniform:128:1024"``, ``"lognormal:512:0.8"``; every
        number finite, token counts whole numbers in ``1..MAX_LENGTH``, ``sigma`` in
        ``(0, MAX_SIGMA]`` (one line naming the part and the rule otherwise)."""
        parts = text.strip().split(":")
        if len(parts) == 1:
            return cls(kind="fixed", mean=_tokens(text, parts[0]))
        kind, args = parts[0], parts[1:]
        if kind == "fixed" and len(args) == 1:
            return cls(kind="fixed", mean=_tokens(text, args[0]))
        if kind == "uniform" and len(args) == 2:
            lo, hi = _tokens(text, args[0]), _tokens(text, args[1])
            return cls(kind="uniform", mean=max(1, (lo + hi) // 2), low=lo, high=hi)
        if kind == "lognormal" and len(args) in (2, 3):
            sigma = _number(text, args[1])
            require(
                0 < sigma <= MAX_SIGMA,
                f"length ({text!r}) sigma ({args[1]}) must be in (0, {MAX_SIGMA:g}]",
            )
            return cls(
                kind="lognormal",
                median=_tokens(text, args[0]),
                sigma=sigma,
                high=_tokens(text, args[2]) if len(args) == 3 else 0,
            )
        raise_bad(text)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.mean, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)
        x = np.rint(self.median * np.exp(self.sigma * rng.standard_normal(n))).astype(np.int64)
        return np.clip(x, self.low, self.high or np.iinfo(np.int64).max)

    @property
    def max(self) -> int:
        """Largest value the distribution can produce (``median * e^(4 sigma)`` when
        unclipped)."""
        if self.kind == "fixed":
            return self.mean
        if self.kind == "uniform" or self.high:
            return self.high
        return int(self.median * np.exp(4 * self.sigma))


def _phi(z: float) -> float:
    """The standard normal CDF."""
    return 0.5 * math.erfc(-z / math.sqrt(2)) if math.isfinite(z) else float(z > 0)


#: Largest token count a length distribution names: 2^30, the longest context a model
#: config may state (moeplan.specs.limits.MAX_CONTEXT).
MAX_LENGTH = 2**30
#: Largest lognormal sigma: e^(4 * 8) = 8e13 times the median at the distribution's stated
#: maximum (``LengthDist.max``) is already beyond every context; more only overflows.
MAX_SIGMA = 8.0


def _number(text: str, part: str) -> float:
    try:
        v = float(part)
    except ValueError:
        raise_bad(text)
    require(math.isfinite(v), f"length ({text!r}) part {part!r} must be a finite number")
    return v


def _tokens(text: str, part: str) -> int:
    """A token count of the grammar: a whole number in 1..MAX_LENGTH."""
    v = _number(text, part)
    require(
        v == int(v) and 1 <= v <= MAX_LENGTH,
        f"length ({text!r}) part {part!r} must be a whole number of tokens in 1..{MAX_LENGTH}",
    )
    return int(v)


def raise_bad(text: str) -> NoReturn:
    raise MoeplanError(
        f"length ({text!r}) must be N, fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA[:MAX]"
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeWorkload:
    """Open (``rate``) or closed (``concurrency``) request stream with length distributions."""

    num_requests: int = 1000
    rate: float | None = 1.0
    concurrency: int | None = None
    arrival: str = "poisson"
    cv: float = 1.0
    isl: LengthDist = LengthDist(mean=1024)
    osl: LengthDist = LengthDist(mean=256)
    prefix_hit: float = 0.0
    think_s: float = 0.0  # closed loop only: mean think time between a client's requests
    seed: int = 0

    def __post_init__(self) -> None:
        require(
            0.0 <= self.think_s < float("inf"),
            f"workload.think_s ({self.think_s}) must be finite and >= 0",
        )
        require(
            self.think_s == 0.0 or self.concurrency is not None,
            f"workload.think_s ({self.think_s}) applies to a closed loop (concurrency) only",
        )
        require(self.num_requests >= 1, f"workload.num_requests ({self.num_requests}) must be >= 1")
        require(
            (self.rate is None) != (self.concurrency is None),
            f"workload needs exactly one of rate ({self.rate}) and concurrency "
            f"({self.concurrency})",
        )
        require(self.rate is None or self.rate > 0, f"workload.rate ({self.rate}) must be > 0")
        require(
            self.concurrency is None or self.concurrency >= 1,
            f"workload.concurrency ({self.concurrency}) must be >= 1",
        )
        require(
            self.arrival in ARRIVALS,
            f"workload.arrival ({self.arrival!r}) must be one of {ARRIVALS}",
        )
        require(self.cv > 0, f"workload.cv ({self.cv}) must be positive")
        require(
            0.0 <= self.prefix_hit < 1.0,
            f"workload.prefix_hit ({self.prefix_hit}) must be in [0, 1)",
        )

    def with_rate(self, rate: float) -> ServeWorkload:
        return ServeWorkload(
            num_requests=self.num_requests,
            rate=rate,
            arrival=self.arrival,
            cv=self.cv,
            isl=self.isl,
            osl=self.osl,
            prefix_hit=self.prefix_hit,
            seed=self.seed,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Requests:
    """Arrays, one entry per request: arrival (s), prompt and output tokens, cached prefix."""

    arrival_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    cached: np.ndarray
    closed: int = 0  # > 0: closed loop with this many clients (arrival_s ignored)
    think_s: np.ndarray | None = None  # closed loop: think time before each request (s)
    #: closed loop: when each request is due at the earliest (a benchmark client's schedule
    #: under a concurrency cap: sent at the later of its due time and a free slot)
    due_s: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        for f in ("isl", "osl", "cached"):
            require(
                len(getattr(self, f)) == n,
                f"requests.{f} has {len(getattr(self, f))} rows, arrival_s has {n}",
            )
        require(n >= 1, "requests must not be empty")
        require(bool(np.all(self.isl >= 1)), "requests.isl must be >= 1 for every request")
        require(bool(np.all(self.osl >= 1)), "requests.osl must be >= 1 for every request")
        require(
            bool(np.all((self.cached >= 0) & (self.cached < self.isl))),
            "requests.cached must be in [0, isl) for every request",
        )
        require(
            bool(np.all(np.isfinite(self.arrival_s))) and bool(np.all(self.arrival_s >= 0)),
            "requests.arrival_s must be finite and >= 0",
        )
        require(
            bool(np.all(np.diff(self.arrival_s) >= 0)),
            "requests.arrival_s must be sorted (non-decreasing)",
        )
        require(
            self.think_s is None
            or (
                len(self.think_s) == n
                and bool(np.all(np.isfinite(self.think_s) & (self.think_s >= 0)))
            ),
            "requests.think_s must have one finite value >= 0 per request",
        )
        require(
            self.due_s is None
            or (
                self.closed > 0
                and len(self.due_s) == n
                and bool(np.all(np.isfinite(self.due_s) & (self.due_s >= 0)))
            ),
            "requests.due_s applies to a closed loop, one finite value >= 0 per request",
        )

    def __len__(self) -> int:
        return len(self.arrival_s)


def requests_from_rows(arrival_s, isl, osl, prefix_hit: float = 0.0) -> Requests:
    """Requests from given columns (sorted by arrival here; ties keep their order)."""
    a = np.asarray(arrival_s, dtype=np.float64)
    order = np.argsort(a, kind="stable")
    i = np.asarray(isl, dtype=np.int64)[order]
    return Requests(
        arrival_s=a[order],
        isl=i,
        osl=np.asarray(osl, dtype=np.int64)[order],
        cached=np.minimum(i - 1, np.floor(prefix_hit * i).astype(np.int64)),
    )


def generate(w: ServeWorkload) -> Requests:
    """The request stream of ``w`` (same seed, same stream)."""
    rng = np.random.default_rng(w.seed)
    n = w.num_requests
    if w.arrival == "poisson":
        gaps = rng.exponential(1.0, size=n)
    else:
        shape = 1.0 / (w.cv * w.cv)
        gaps = rng.gamma(shape, 1.0 / shape, size=n)
    isl = w.isl.sample(rng, n)
    osl = w.osl.sample(rng, n)
    if w.rate is None:
        return Requests(
            arrival_s=np.zeros(n),
            isl=isl,
            osl=osl,
            cached=np.minimum(isl - 1, np.floor(w.prefix_hit * isl).astype(np.int64)),
            closed=int(w.concurrency or 0),
            # the unit-mean gaps drawn above, scaled: the same stream at every think time
            think_s=gaps * w.think_s if w.think_s > 0 else None,
        )
    reqs = requests_from_rows(np.cumsum(gaps) / w.rate, isl, osl, w.prefix_hit)
    return reqs
