"""``moeplan serve-sim``'s flags, checked and resolved before any simulation.

What is served (:func:`resolve_deployment`: layout flags, a ``plan.json`` or a ``--pd`` pair,
with what a plan written by ``moeplan plan`` recorded filling the flags left unset), and the
request stream and SLOs it is served under (:func:`serve_inputs`). Every refusal is one
line naming the flag, its value and the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from moeplan.cli._steady import check_fits
from moeplan.cli.serve_pd import check_pd_flags, read_pd
from moeplan.cli.serve_plan import layout_from_plan, plan_knobs, served_deployment
from moeplan.errors import require
from moeplan.planners.plan import Plan
from moeplan.search.colocated.evaluate import ENGINES
from moeplan.serve import SLO, LengthDist, ServeLayout, ServeWorkload
from moeplan.serve.pools.pd import PDLayout
from moeplan.specs.cluster import ClusterSpec
from moeplan.specs.hf_config import read_json_file

DEFAULT_TTFT_SLO_MS = 2000.0  # same defaults as ``moeplan plan``
DEFAULT_TPOT_SLO_MS = 100.0
DEFAULT_ISL, DEFAULT_OSL = 2048, 256  # same defaults as ``moeplan plan``
MAX_REQUESTS = 200_000
MAX_THINK_MS = (
    3_600_000.0  # one hour: bounds the simulated clock; no interactive client idles longer
)
LAYOUT_FLAGS = ("attn_tp", "attn_dp", "moe_tp", "moe_ep", "pp", "micro_batches")


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """What serve-sim simulates: one instance ``layout`` (``replicas`` copies) or the P/D
    pair ``pd``, with the engine settings and instance knobs given or read from the plan."""

    layout: ServeLayout  # the instance (P/D: the prefill pool's)
    pd: PDLayout | None
    plan: Plan | None
    replicas: int
    chunk_tokens: int | None
    max_running: int | None
    a2a: str
    tbo: bool | None
    kv_dtype: str


def resolve_deployment(
    pd: str | None,
    plan: str | None,
    flags: dict[str, int | None],
    *,
    replicas: int | None,
    chunk_tokens: int | None,
    max_running: int | None,
    a2a: str,
    tbo: bool | None,
    kv_dtype: str,
    redundant_experts: int,
    phase: str | None,
    concurrency: int | None,
    trace_out: str | None,
) -> Deployment:
    """The deployment of the flags; a plan written by ``moeplan plan`` is simulated as it
    served it (instance, replicas, knobs, chunk and running cap) unless a flag says else."""
    require(redundant_experts >= 0, f"--redundant-experts ({redundant_experts}) must be >= 0")
    deployment = None
    if pd is not None:
        check_pd_flags(flags, plan, concurrency, chunk_tokens, max_running, trace_out)
        knob_given = {
            "--phase": phase,
            "--redundant-experts": redundant_experts or None,
            "--tbo/--no-tbo": tbo,
            "--kv-dtype": None if kv_dtype == "auto" else kv_dtype,
            "--a2a": None if a2a == "auto" else a2a,
        }
        bad = [k for k, v in knob_given.items() if v is not None]
        require(
            not bad,
            f"{bad[0] if bad else ''} does not apply to --pd (each pool runs the "
            "engine's all-to-all and the better two-batch overlap setting; redundant experts "
            "go in the layout: moe-rN; --mtp applies to the decode pool)",
        )
        deployment, the_plan = read_pd(pd)
        layout = deployment.prefill
    else:
        layout, the_plan = _layout(plan, flags)
    served = served_deployment(the_plan) if the_plan is not None and pd is None else None
    if served is not None:  # what `moeplan plan` served, exactly (cli/serve_plan.py)
        layout = served.layout
        replicas = served.replicas if replicas is None else replicas
        chunk_tokens = served.chunk_tokens if chunk_tokens is None else chunk_tokens
        max_running = served.max_running if max_running is None else max_running
        a2a, tbo, kv_dtype = plan_knobs(served, a2a, tbo, kv_dtype)
    if redundant_experts and deployment is None:
        layout = replace(layout, redundant_experts=redundant_experts)
    return Deployment(
        layout=layout, pd=deployment, plan=the_plan, replicas=1 if replicas is None else replicas,
        chunk_tokens=chunk_tokens, max_running=max_running, a2a=a2a, tbo=tbo, kv_dtype=kv_dtype,
    )  # fmt: skip


def check_fits_cluster(d: Deployment, c: ClusterSpec, one_instance: bool) -> None:
    """One line when the deployment needs more GPUs than ``c`` has (``one_instance``: a
    closed loop or one phase, which run a single instance), with what would fit."""
    if d.pd is not None:
        check_fits(f"--pd deployment ({d.pd.label})", d.pd.gpus, c)
    elif d.replicas > 1 and not one_instance:
        where = f"{d.replicas} replicas of {d.layout.label}"
        check_fits(where, d.layout.gpus * d.replicas, c, per_copy=d.layout.gpus)
    else:
        check_fits(f"layout {d.layout.label}", d.layout.gpus, c)


def _layout(plan_path: str | None, flags: dict[str, int | None]) -> tuple[ServeLayout, Plan | None]:
    given = [k for k, v in flags.items() if v is not None]
    require(
        flags["micro_batches"] is None or (flags["pp"] or 1) > 1,
        "--micro-batches applies to pipelines only (--pp > 1)",
    )
    if plan_path is None:
        return ServeLayout(**{k: v for k, v in flags.items() if v is not None}), None
    require(
        not given,
        f"--plan and layout flags ({', '.join('--' + g.replace('_', '-') for g in given)})"
        " are exclusive",
    )
    plan = Plan.from_dict(read_json_file(plan_path, "plan"))
    return layout_from_plan(plan), plan


def _lengths(fixed: int | None, dist: str | None, name: str, default: int) -> LengthDist:
    require(fixed is None or dist is None, f"--{name} and --{name}-dist are exclusive")
    require(fixed is None or fixed >= 1, f"--{name} ({fixed}) must be >= 1")
    return LengthDist.parse(dist) if dist else LengthDist(mean=fixed or default)


def _think_s(think_ms: float, concurrency: int | None) -> float:
    require(
        math.isfinite(think_ms) and 0 <= think_ms <= MAX_THINK_MS,
        f"--think-ms ({think_ms}) must be in [0, {MAX_THINK_MS:g}]",
    )
    require(
        think_ms == 0 or concurrency is not None,
        "--think-ms applies to a closed loop (--concurrency) only",
    )
    return think_ms / 1e3


def serve_inputs(
    *,
    ttft_slo: float,
    tpot_slo: float,
    slo_percentile: float,
    requests: int,
    rate: float | None,
    concurrency: int | None,
    arrival: str,
    cv: float,
    lengths: tuple[int | None, str | None, int | None, str | None],
    prefix_hit: float,
    think_ms: float,
    seed: int,
) -> tuple[SLO, ServeWorkload]:
    """The SLOs and the request stream (``lengths``: --isl, --isl-dist, --osl, --osl-dist)."""
    require(ttft_slo > 0 and tpot_slo > 0, "--ttft-slo and --tpot-slo must be positive (ms)")
    require(
        slo_percentile in (50.0, 90.0, 99.0),
        f"--slo-percentile ({slo_percentile}) must be 50, 90 or 99",
    )
    slo = SLO(ttft_s=ttft_slo / 1e3, tpot_s=tpot_slo / 1e3, percentile=slo_percentile)
    isl, isl_dist, osl, osl_dist = lengths
    w = ServeWorkload(
        num_requests=requests,
        rate=None if concurrency else (rate or 1.0),
        concurrency=concurrency,
        arrival=arrival,
        cv=cv,
        isl=_lengths(isl, isl_dist, "isl", DEFAULT_ISL),
        osl=_lengths(osl, osl_dist, "osl", DEFAULT_OSL),
        prefix_hit=prefix_hit,
        think_s=_think_s(think_ms, concurrency),
        seed=seed,
    )
    return slo, w


def check_flags(
    engine: str,
    rate: float | None,
    concurrency: int | None,
    requests: int,
    chunk_tokens: int | None,
    max_running: int | None,
    arrival: str,
    cv: float,
) -> None:
    """One-line errors for flags that would otherwise be ignored or meaningless."""
    require(engine in ENGINES, f"--engine ({engine!r}) must be one of {', '.join(ENGINES)}")
    require(rate is None or concurrency is None, "--rate and --concurrency are exclusive")
    require(rate is None or rate > 0, f"--rate ({rate}) must be positive")
    require(1 <= requests <= MAX_REQUESTS, f"--requests ({requests}) must be in 1..{MAX_REQUESTS}")
    require(
        chunk_tokens is None or chunk_tokens >= 0, f"--chunk-tokens ({chunk_tokens}) must be >= 0"
    )
    require(max_running is None or max_running >= 1, f"--max-running ({max_running}) must be >= 1")
    require(
        concurrency is None or 1 <= concurrency <= requests,
        f"--concurrency ({concurrency}) must be in 1..--requests ({requests}): clients beyond "
        "the requests simulated would never send one",
    )
    require(
        cv == 1.0 or arrival == "gamma",
        f"--cv ({cv}) applies to --arrival gamma only (arrival is {arrival!r})",
    )
    require(
        concurrency is None or arrival == "poisson",
        "--arrival applies to open workloads (--rate), not --concurrency",
    )
