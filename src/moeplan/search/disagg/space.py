"""The disaggregated deployment space: every prefill instance kind and every decode instance
kind of :func:`moeplan.search.disagg.pools.pools` (colocated decode for ``pd``, attention–FFN for
``afd``), paired, with any counts ``x`` and ``y`` whose GPUs fit the cluster, at most
:data:`MAX_INSTANCES` instances in all, sharing no factor (``k x : k y`` is ``k`` copies of
``x : y``, one router each: its capacity per GPU is that of ``x : y`` and the cluster holds
as many copies as fit, :func:`copies`). Each deployment (:class:`PoolCandidate`) gets the
upper bound of :mod:`moeplan.search.disagg.bound` (its pools alone, analytic: no
simulation) and the analytic estimate of :func:`moeplan.search.disagg.pools.rate_match`'s scoring;
:mod:`moeplan.search.disagg.search` searches it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from moeplan.search.capacity.slo import Capacity, SteadyProbe, in_service
from moeplan.search.disagg.bound import (
    decode_rate_bound,
    deployment_rate_bound,
    prefill_rate_bound,
)
from moeplan.search.disagg.pools import (
    Candidate,
    Context,
    InstanceCapacity,
    decode_pools,
    make_candidate,
    prefill_pools,
)
from moeplan.serve.pools.pd import simulate_pd
from moeplan.serve.workload.arrivals import Requests

#: Instances per deployment at most (module docstring): x + y <= 16 matches any pool ratio to
#: within 1/16, and every larger deployment is simulated as one router's stream of a
#: thousand requests/s and more (a 43:7 Qwen3-30B-A3B deployment on 128 H100s: 300,000
#: requests per steady run, 80 s per capacity search), where copies of a smaller ratio
#: serve the same load per GPU.
MAX_INSTANCES = 16


@dataclass(kw_only=True)
class PoolCandidate:
    """One deployment of the space (``x`` of ``prefill``, ``y`` of ``decode``) and what the
    search learned of it; rates are requests/s into the whole deployment."""

    family: str
    prefill: InstanceCapacity
    decode: InstanceCapacity
    x: int
    y: int
    bound: float  # output tokens/s per GPU never exceeded (disagg_bound)
    estimate: float  # analytic estimate, output tokens/s per GPU
    gpus: int
    bound_rps: float
    estimate_rps: float
    cand: Candidate | None = None
    capacity: Capacity | None = None
    probe: SteadyProbe | None = None
    beaten_at: float = 0.0
    runs: dict = field(default_factory=dict)
    prefill_runs: dict = field(default_factory=dict)  # rate -> a prefill pool's failing run

    def candidate(self, c: Context) -> Candidate:
        if self.cand is None:
            self.cand = make_candidate(c, self.prefill, self.decode, self.x, self.y)
        return self.cand

    def runner(self, c: Context) -> Callable[[Requests, float | None], Any]:
        setup = self.candidate(c).setup

        def run(reqs: Requests, stop: float | None) -> Any:
            return simulate_pd(reqs, setup, horizon_s=stop).result

        return run

    def slots(self, c: Context) -> int:
        """The requests the deployment holds in service at saturation, what sizes its
        probes (:func:`moeplan.search.capacity.slo.in_service`; never the SLO): each decode
        instance's, and each prefill instance's prompts of one full prefill iteration."""
        setup, w = self.candidate(c).setup, c.workload
        isl = max(1, round(w.isl.mean))
        per_prefill = max(1, (setup.prefill_cfg.chunk_tokens or isl) // isl)
        return self.x * per_prefill + self.y * in_service(setup.decode_cfg, w)

    def capacity_per_gpu(self, osl: float) -> float:
        return 0.0 if self.capacity is None else self.capacity.per_gpu(osl, self.gpus)


def pool_candidate(
    c: Context,
    family: str,
    p: InstanceCapacity,
    d: InstanceCapacity,
    x: int,
    y: int,
    bounds: tuple[float, float],
) -> PoolCandidate:
    """``x`` of ``p`` and ``y`` of ``d``, with the pools' rate bounds ``bounds`` (requests/s
    per prefill and per decode instance, :mod:`moeplan.search.disagg.bound`)."""
    osl = c.workload.osl.mean
    g = x * p.layout.gpus + y * d.layout.gpus
    est = min(x * p.rate, y * d.rate)
    top = deployment_rate_bound(x, bounds[0], y, bounds[1])
    return PoolCandidate(
        family=family, prefill=p, decode=d, x=x, y=y, gpus=g, bound=top * osl / g,
        bound_rps=top, estimate=est * osl / g, estimate_rps=est,
    )  # fmt: skip


def space(
    c: Context, families: list[str], bounds: dict[str, list[float]] | None = None
) -> list[PoolCandidate]:
    """Every (prefill kind, decode kind, x, y) of ``families`` that fits the cluster, with
    its bound and estimate (module docstring). ``bounds``: the pools' rate bounds (requests/s
    per instance, in pool order) under ``"prefill"`` and each family's name, as an earlier
    call with the same arguments filled them in (they are most of this call's time); a key
    missing is computed and filled in."""
    n, w = c.cluster.num_gpus, c.workload
    known = {} if bounds is None else bounds
    pres = prefill_pools(c) if families else []
    if "prefill" not in known:
        known["prefill"] = [prefill_rate_bound(p.evaluate, p.cfg, w) for p in pres]
    bp = known["prefill"]
    out = []
    for fam in families:
        decs = decode_pools(c, fam)
        if fam not in known:
            known[fam] = [decode_rate_bound(d.evaluate, d.cfg, w, c.slo) for d in decs]
        bd = known[fam]
        for p, b_p in zip(pres, bp, strict=True):
            gp = p.layout.gpus
            for d, b_d in zip(decs, bd, strict=True):
                gd = d.layout.gpus
                for x in range(1, min(MAX_INSTANCES - 1, (n - gd) // gp) + 1):
                    top = min(MAX_INSTANCES - x, (n - x * gp) // gd)
                    for y in range(1, top + 1):
                        if math.gcd(x, y) == 1:  # k x : k y is k copies of x : y
                            out.append(pool_candidate(c, fam, p, d, x, y, (b_p, b_d)))
    return out


def copies(c: Context, pc: PoolCandidate) -> tuple[int, int]:
    """How many copies of ``pc`` the cluster holds, and the GPUs left over."""
    n = c.cluster.num_gpus
    return n // pc.gpus, n % pc.gpus
