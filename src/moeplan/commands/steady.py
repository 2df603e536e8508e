"""Bad input of the serving searches, with the closest figure that would be accepted: a
request count too small to bound the SLO percentile, a deployment larger than the cluster,
an arrival rate whose steady run would not fit in memory.

The percentile rule is the capacity search's own (``percentile_boundable`` of its capacity
record, :mod:`moeplan.search.capacity.slo`): one run's distribution-free 95 % upper order
statistic of the percentile must lie inside its measured requests,
``ceil(n q + z sqrt(n q (1 - q))) <= n`` (p90 needs 35 requests, p99 381), else no probe's
verdict is bounded. ``plan`` refuses such a count before its search; ``serve-sim`` after its
one layout's capacity search, with the figure it measured.
"""

from __future__ import annotations

import math
from typing import Any

from moeplan.errors import MoeplanError
from moeplan.search.capacity.slo import (
    CI_TARGET,
    TAIL_LIFETIMES,
    WARM_LIFETIMES,
    lifetime_s,
    percentile_boundable,
)
from moeplan.serve import SLO, ServeWorkload
from moeplan.specs.cluster import MAX_NODES, ClusterSpec

#: Requests one steady run may simulate (warm-up, measured and drain). Measured on this
#: project's CI-class machine: serve-sim qwen3-30b-a3b on h100-sxm-8, --rate 1e5 --isl 128
#: --osl 16 simulates 1.08 M requests in 29 s at 657 MB peak RSS; --rate 1e6 (10.8 M) ends in
#: a MemoryError under a 3 GB limit. Two million keep one run near 1.3 GB.
MAX_SIMULATED = 2_000_000


def min_requests(percentile: float) -> int:
    """The fewest measured requests whose run can bound the SLO ``percentile``."""
    n = 1
    while not percentile_boundable(n, percentile):
        n += 1
    return n


def check_requests(
    requests: int, percentile: float, floor: int = 1, ceiling: int | None = None
) -> None:
    """One line when ``--requests`` is too small for a steady estimate (a closed loop: give
    ``percentile`` 50 and the command's ``floor``): the closest count accepted (at least
    ``floor``, the command's own smallest; at most ``ceiling``)."""
    if ceiling is not None and requests > ceiling:
        raise MoeplanError(f"--requests ({requests}) must be at most {ceiling}")
    least = min_requests(percentile)
    if requests >= max(floor, least):
        return
    why = (
        f"a run must measure at least {least} requests to bound the p{percentile:g} (95 %)"
        if least >= floor
        else f"this command measures at least {floor} requests per run"
    )
    raise MoeplanError(
        f"--requests ({requests}) is too small for a steady estimate: {why}; "
        f"use --requests {max(floor, least)} or more"
    )


def check_fits(what: str, gpus: int, cluster: ClusterSpec, per_copy: int | None = None) -> None:
    """One line when ``what`` needs more than the cluster's GPUs: how many copies of a
    ``per_copy``-GPU instance fit, and the ``--nodes`` (``--racks`` on a rack cluster) that
    would hold it all."""
    n = cluster.num_gpus
    if gpus <= n:
        return
    nodes = math.ceil(gpus / cluster.gpus_per_node)
    hints = []
    if per_copy is not None and n >= per_copy:
        hints.append(f"at most {n // per_copy} of its {per_copy}-GPU instances fit (--replicas "
                     f"{n // per_copy})")  # fmt: skip
    if cluster.mnnvl:  # a rack cluster grows by whole NVLink domains
        racks = math.ceil(gpus / cluster.nvlink_domain)
        hints.append(f"--racks {racks} gives {racks * cluster.nvlink_domain} GPUs")
    elif nodes <= MAX_NODES:
        hints.append(f"--nodes {nodes} gives {nodes * cluster.gpus_per_node} GPUs")
    raise MoeplanError(
        f"{what} needs {gpus} GPUs; the cluster has {n} ({cluster.name}, {cluster.num_nodes} "
        f"x {cluster.gpus_per_node})" + (": " + "; ".join(hints) if hints else "")
    )


def require_boundable(rec: dict[str, Any], layout: str, percentile: float) -> None:
    """After a capacity search (``rec``: its capacity record): one line when its measured
    requests cannot bound the SLO percentile, with the capacity it measured, its interval
    and the request count that both bounds the percentile and brings the interval within
    the steady target (the half-width shrinks as 1/sqrt(requests))."""
    if rec.get("percentile_boundable", True):
        return
    n, ci, least = rec["measured_requests"], rec["ci95_half_width_rel"], min_requests(percentile)
    finite = math.isfinite(ci)
    need = max(least, math.ceil(n * (ci / CI_TARGET) ** 2) if finite else 0)
    raise MoeplanError(
        f"--requests ({n}) is too small for a steady estimate at p{percentile:g}: {layout} "
        f"sustains {rec['output_tokens_per_s_per_gpu']:,.1f} output tokens/s per GPU"
        + (f" +/- {ci:.1%} (95 %)" if finite else "")
        + f", but the p{percentile:g} of one run needs at least {least} measured requests; "
        f"try --requests {need}"
    )


def check_rate(rate: float | None, instances: int, w: ServeWorkload, slo: SLO) -> None:
    """One line when a steady run at ``rate`` (fed round-robin to ``instances``) would
    simulate more than :data:`MAX_SIMULATED` requests: its warm-up and drain are
    ``WARM_LIFETIMES + TAIL_LIFETIMES`` SLO lifetimes of arrivals. Says the largest rate run."""
    if rate is None:
        return
    life, span = lifetime_s(w, slo), WARM_LIFETIMES + TAIL_LIFETIMES
    per = rate / max(1, instances)
    n = math.ceil(span * per * life) + w.num_requests
    if n <= MAX_SIMULATED:
        return
    top = (MAX_SIMULATED - w.num_requests) / (span * life) * max(1, instances)
    raise MoeplanError(
        f"--rate ({rate:g} req/s) is past what a steady run simulates: {n:,} requests per "
        f"instance ({span:g} SLO lifetimes of {life:.3g} s of warm-up and drain at "
        f"{per:.4g} req/s, plus {w.num_requests} measured; at most {MAX_SIMULATED:,}); the "
        f"largest --rate simulated here is {math.floor(top):,} req/s"
    )
