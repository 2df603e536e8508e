"""``moeplan serve-sim``'s answers: one deployment simulated under load, as the JSON object
the command prints.

One instance layout (``replicas`` round-robin copies, :func:`simulate_single`): its SLO-bound
capacity in steady state (:func:`moeplan.search.capacity.sim.layout_capacity`, the figure
``moeplan plan`` ranks by) and the steady run at capacity or at ``--rate``, or one closed-loop
run (``--concurrency``). A prefill/decode pair of pools (:func:`simulate_pd`,
:func:`moeplan.search.disagg.given.simulate_given`), the layout being the P/D pair. One phase's
steady step per GPU (:func:`phase_answer`, :class:`moeplan.serve.iteration.phase.PhaseModel`). Each
answer is :func:`payload`'s object plus what its kind adds.

Phase JSON keys (fixed): ``phase``, ``step_ms``, ``tokens_per_s_per_gpu``, ``batch_per_gpu``
(decode) or ``tokens_per_gpu`` (prefill), ``context``, ``breakdown_ms`` (``attention, moe,
dispatch, combine, dense, other`` and, under two-batch overlap, a negative ``overlap``; they
sum to ``step_ms``; with a weight offload, ``offload``: the step's wait for the host link),
``weight_offload`` (None, or the offload priced: :func:`offload_answer`).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from moeplan.backends import backend_or_none, priced_engine
from moeplan.commands.serve_inputs import ServedInstance
from moeplan.commands.steady import require_boundable
from moeplan.cost import CostModel
from moeplan.cost.offload import AUTO, OFF, WeightOffload, offload_memory
from moeplan.cost.price_sources import headline_interval
from moeplan.errors import MoeplanError, require
from moeplan.kernel_tables import pricing
from moeplan.planners.layout import Layout
from moeplan.search.capacity.sim import layout_capacity
from moeplan.search.capacity.slo import WINDOW_LIFETIMES, steady_probe
from moeplan.search.colocated.evaluate import ServeResult, evaluate_layout, run_workload
from moeplan.search.colocated.rank import replicated, require_steady, serve_result
from moeplan.search.disagg.given import simulate_given
from moeplan.search.disagg.pools import Context, DisaggResult
from moeplan.serve import SLO, IterationModel, ServeWorkload
from moeplan.serve.cuda_graphs import graphs_record
from moeplan.serve.deployment import PDLayout, require_launchable
from moeplan.serve.host_record import host_record
from moeplan.serve.iteration.instance_knobs import KV_DTYPES, InstanceKnobs, resolve_knobs
from moeplan.serve.iteration.phase import PhaseModel, PhaseResult
from moeplan.serve.iteration.price_sources import (
    layout_run_price_sources,
    pd_run_price_sources,
    phase_price_sources,
)
from moeplan.specs import ClusterSpec, ModelSpec, RoutingProfile


def _metrics_dict(r: ServeResult | DisaggResult, rate: float | None) -> dict[str, Any]:
    m: dict[str, Any] = r.metrics.to_dict() if r.metrics is not None else {}
    m["max_rate_meeting_slo_rps"] = r.max_rate_meeting_slo_rps
    m["rate_simulated_rps"] = rate
    # an unstable queue: the rate offered exceeds what the deployment serves, and the
    # throughput above is what it served (moeplan.search.capacity.slo.window_metrics)
    m["overloaded"] = r.overloaded
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in m.items()}


def overload_line(out: dict[str, Any]) -> str:
    """One sentence for an overloaded run (``out``: its JSON answer): the load offered
    against what the deployment served."""
    m, w = out["metrics"], out["workload"]
    offered = w["rate_rps"] * w["osl_mean"]
    return (
        f"Overloaded: {w['rate_rps']:.4g} req/s offered ({offered:,.0f} output tokens/s) but "
        f"the queue grows without bound; the deployment served {m['output_tokens_per_s']:,.0f} "
        "output tokens/s (the throughput above), and latencies grow with the run's length."
    )


def payload(
    model: str,
    cluster: str,
    r: ServeResult | DisaggResult,
    w: ServeWorkload,
    slo: SLO,
    rate: float | None,
    engine: str,
) -> dict[str, Any]:
    """The JSON object every serve-sim answer starts from: the deployment, its scheduler, the
    request stream, the SLOs and the metrics of the run at ``rate``."""
    e = r.engine
    assert e is not None
    return {
        "model": model,
        "cluster": cluster,
        "label": r.label,
        "gpus": r.layout.gpus,
        "layout": r.layout.to_dict(),
        "engine": {
            "name": engine,
            "policy": e.policy,
            "chunk_tokens": e.chunk_tokens,
            "max_running": e.max_running,
            "kv_tokens": e.kv_tokens,
            "kv_tokens_per_rank": e.kv_tokens_per_rank,
            "kv_window_tokens_per_request": e.seq_kv,
            "mem_fraction": e.mem_fraction,
        },
        "workload": {
            "requests": w.num_requests,
            "rate_rps": rate,
            "concurrency": w.concurrency,
            "arrival": w.arrival,
            "cv": w.cv,
            "isl": w.isl.kind,
            "isl_mean": w.isl.mean,
            "isl_median": w.isl.median or None,  # lognormal only
            "osl": w.osl.kind,
            "osl_mean": w.osl.mean,
            "osl_median": w.osl.median or None,
            "prefix_hit": w.prefix_hit,
            "think_s": w.think_s,
            "seed": w.seed,
        },
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "percentile": slo.percentile},
        "meets_slo": r.meets_slo,
        "bound": r.bound,
        "metrics": _metrics_dict(r, rate),
    }


def simulate_single(
    m: ModelSpec,
    c: ClusterSpec,
    cm: CostModel,
    d: ServedInstance,
    w: ServeWorkload,
    slo: SLO,
    knob_flags: dict[str, Any],
    *,
    engine: str,
    rate: float | None,
    routing: RoutingProfile | None,
) -> tuple[dict[str, Any], ServeResult, Any, InstanceKnobs]:
    """Simulate ``d``'s instance under ``w`` with the instance knobs of ``knob_flags`` (the
    engine's defaults for those not given): the JSON answer, the result, the simulation (its
    iterations make the Chrome trace) and the knobs."""
    knobs = resolve_knobs(cm.engine, m, c, d.layout, **knob_flags, version=cm.engine_version)
    closed = w.concurrency is not None
    if closed:  # a closed loop: the knob search and one run
        r, sim = _closed_loop(m, c, cm, d, w, slo, knobs, engine=engine, routing=routing)
        at, cap_rec = None, None
    else:  # SLO-bound capacity in steady state, the figure `moeplan plan` ranks by
        r, sim, at, cap_rec = _at_capacity(
            m, c, cm, d, w, slo, knobs, engine=engine, rate=rate, routing=routing
        )
    out = payload(m.name, c.name, r, w, slo, at, engine)
    out["replicas"] = 1 if closed else d.replicas  # copies of this instance
    out["capacity"] = cap_rec
    out.update(_provenance(m, cm, d.layout, knobs))
    out["price_sources"] = layout_run_price_sources(m, c, cm, d.layout, knobs, routing, sim)
    assert r.engine is not None
    out["cuda_graphs"] = graphs_record(engine, m, c, d.layout, r.engine, knobs, [sim])
    out["host"] = host_record(cm.engine, cm.engine_version, knobs, d.layout.attn_dp, [sim])
    half = None if cap_rec is None else cap_rec["ci95_half_width_rel"]
    out["interval"] = headline_interval(half, out["price_sources"])
    return out, r, sim, knobs


def _closed_loop(
    m: ModelSpec,
    c: ClusterSpec,
    cm: CostModel,
    d: ServedInstance,
    w: ServeWorkload,
    slo: SLO,
    knobs: InstanceKnobs,
    *,
    engine: str,
    routing: RoutingProfile | None,
) -> tuple[ServeResult, Any]:
    """The knob search (unless given) and one closed-loop run of ``w``."""
    r = evaluate_layout(
        m,
        c,
        cm,
        d.layout,
        w,
        slo,
        engine=engine,
        chunk_tokens=d.chunk_tokens,
        max_running=d.max_running,
        search_requests=w.num_requests,
        knobs=knobs,
        routing=routing,
    )
    if not r.feasible:
        raise MoeplanError(r.reason)
    assert r.engine is not None
    ev = IterationModel(m, c, cm, d.layout, routing, knobs=knobs)
    sim, metrics = run_workload(r.engine, w, ev, d.layout.gpus, slo)
    return replace(r, metrics=metrics, meets_slo=metrics.meets(slo)), sim


def _at_capacity(
    m: ModelSpec,
    c: ClusterSpec,
    cm: CostModel,
    d: ServedInstance,
    w: ServeWorkload,
    slo: SLO,
    knobs: InstanceKnobs,
    *,
    engine: str,
    rate: float | None,
    routing: RoutingProfile | None,
) -> tuple[ServeResult, Any, float, dict[str, Any]]:
    """The capacity search, then the steady run at ``rate`` (or at capacity): the result,
    its simulation, the total rate it ran at and the capacity record."""
    lay, replicas, requests = d.layout, d.replicas, w.num_requests
    require(replicas >= 1, f"--replicas ({replicas}) must be >= 1")
    cand = layout_capacity(
        m,
        c,
        cm,
        lay,
        w,
        slo,
        engine=engine,
        requests=requests,
        replicas=replicas,
        chunk_tokens=d.chunk_tokens,
        max_running=d.max_running,
        knobs=knobs,
        routing=routing,
    )
    assert cand.capacity is not None
    if rate is None and cand.probe is None:
        raise MoeplanError(_unreachable(cand, w, slo))
    probe = _operating_probe(cand, w, slo, rate, requests)
    r = replicated(serve_result(cand, w, slo, rate is not None, probe=probe), replicas)
    at = rate if rate is not None else cand.capacity.rate_rps * replicas
    cap_rec = cand.capacity.to_dict(w.osl.mean, lay.gpus)
    require_boundable(cap_rec, lay.label, slo.percentile)
    require_steady({**cap_rec, "layout": lay.label})
    return r, probe.res, at, cap_rec


def _unreachable(cand: Any, w: ServeWorkload, slo: SLO) -> str:
    """No rate meets the SLOs: the closest figures, the layout's own percentiles at a light
    load (the steady run :func:`serve_result` makes at a fraction of the analytic estimate)."""
    light = serve_result(cand, w, slo, False)
    assert light.metrics is not None and light.run is not None
    pct = slo.percentile
    got = dict(zip(("ttft", "tpot"), light.metrics.at_percentile(pct), strict=True))
    limit = {"ttft": slo.ttft_s, "tpot": slo.tpot_s}
    missed = [k for k in got if limit[k] is not None and got[k] > limit[k]]  # type: ignore[operator]
    wants = ", ".join(f"{k.upper()} p{pct:g} <= {limit[k] * 1e3:.4g} ms" for k in missed)  # type: ignore[operator]
    reach = " and ".join(f"{k.upper()} p{pct:g} {got[k] * 1e3:.4g} ms" for k in got)
    fix = " and ".join(f"--{k}-slo {_up(got[k] * 1e3):.4g}" for k in missed) or "looser SLOs"
    return (
        f"no rate meets the SLOs ({wants or 'as given'}) on {cand.layout.label} in steady "
        f"state: at a light load ({light.run.rate:.3g} req/s per instance, simulated) it reaches "
        f"{reach}; give at least {fix}, or change the layout"
    )


def _up(ms: float) -> float:
    """``ms`` rounded up at its third significant digit (a limit the figure meets)."""
    step = 10.0 ** (math.floor(math.log10(ms)) - 2) if ms > 0 else 1.0
    return math.ceil(ms / step - 1e-9) * step


def _operating_probe(cand: Any, w: ServeWorkload, slo: SLO, rate: float | None, requests: int):
    """The steady run the metrics come from: at ``rate``, else the probe at capacity."""
    if rate is None:
        return cand.probe
    return steady_probe(
        cand.cfg,
        cand.evaluate,
        w,
        slo,
        rate / cand.replicas,
        requests=requests,
        replicas=cand.replicas,
        window_lifetimes=WINDOW_LIFETIMES,
    )


def _provenance(m: ModelSpec, cm: CostModel, lay: Any, knobs: InstanceKnobs) -> dict[str, Any]:
    """The knobs, the quantization warning and the kernel prices' sources of the payload."""
    from moeplan.cost.mixer_prices import stand_in_fields
    from moeplan.cost.provenance import quant_vs_bf16
    from moeplan.search.job.outcome import quant_sentence

    qw = quant_sentence(quant_vs_bf16(cm, m, ep=lay.moe_ep, tp=lay.moe_tp))
    return {
        "knobs": knobs.to_dict(),
        "warnings": [qw] if qw else [],
        "pricing": {**pricing(cm), **stand_in_fields(m, cm.engine is not None)},  # stand-in layers
    }


def simulate_pd(
    pd: PDLayout,
    model: ModelSpec,
    cluster: ClusterSpec,
    cm: CostModel,
    w: ServeWorkload,
    slo: SLO,
    *,
    engine: str,
    rate: float | None,
    requests: int,
    mtp: int = 0,
    mtp_accept: float | None = None,
    mem_fraction: float | None = None,
) -> tuple[DisaggResult, dict[str, Any]]:
    """Simulate ``pd``: its result and the JSON answer (one engine's payload, the layout
    being the P/D pair, with the pools' text and loads); ``mtp``, ``mtp_accept``: the decode
    pool's MTP draft tokens (0: off) and their acceptance, checked first; a deployment
    the engine cannot launch is refused (:func:`moeplan.serve.deployment.require_launchable`)."""
    require_launchable(engine, pd)
    knobs = resolve_knobs(cm.engine, model, cluster, pd.prefill, mtp=mtp, mtp_accept=mtp_accept,
                          version=cm.engine_version)  # fmt: skip
    c = Context(model=model, cluster=cluster, cost=cm, workload=w, slo=slo, engine=engine,
                mtp=knobs.mtp, mtp_accept=knobs.mtp_accept, mem_fraction=mem_fraction)  # fmt: skip
    r = simulate_given(c, pd, rate_given=rate is not None, requests=requests)
    at = rate if rate is not None else r.max_rate_meeting_slo_rps or None
    require(
        at is not None,
        f"no rate meets the SLOs on {pd.label} with both pools stable; raise "
        "--ttft-slo/--tpot-slo, give --rate, or change the deployment",
    )
    extra = {
        "pd": pd.label,
        "pools": {"load_at_matched_rate": {"prefill": r.rho[0], "decode": r.rho[1]}},
        "rate_simulated_rps": at,
    }
    out = payload(model.name, cluster.name, r, w, slo, at, engine)
    wl = w.with_rate(extra["rate_simulated_rps"])
    out.update(extra, pricing=pricing(cm),
               price_sources=pd_run_price_sources(r.setup, wl, model, cluster, cm))  # fmt: skip
    out["interval"] = headline_interval(None, out["price_sources"])  # one run per pool
    return r, out


def phase_answer(
    m: ModelSpec,
    c: ClusterSpec,
    layout: Layout,
    *,
    engine: tuple[str, str | None],
    cost_engine: str,
    profile: str | None,
    phase: str,
    per_gpu: int | None,
    context: int,
    knob_flags: dict[str, Any],
    routing: RoutingProfile | None,
    offload: str = AUTO,
) -> dict[str, Any]:
    """``serve-sim --phase``: check the flags the phase reads, build the cost model, price
    the phase step; the JSON answer (keys: module docstring). ``offload``: the weight
    offload given (``GROUP:NUM[:PREFETCH]``), ``off``, or ``auto``: the smallest that fits
    (:meth:`PhaseModel.fit_offload`) when the weights do not fit, the GPU's record has a host
    link and the engine has the offloader's flags."""
    from moeplan.backends import simulated
    from moeplan.kernel_tables import engine_cost_model

    layout.validate(m, c)
    engine, version = engine  # (--engine, --engine-version)
    engines = simulated()
    require(engine in engines, f"--engine ({engine!r}) must be one of {', '.join(engines)}")
    require(
        cost_engine in ("engine", "none"),
        f"--cost-engine ({cost_engine!r}) must be 'engine' or 'none'",
    )
    cost = engine_cost_model(c, profile, engine=priced_engine(cost_engine, engine), version=version)
    require(
        knob_flags["kv_dtype"] in KV_DTYPES,
        f"--kv-dtype ({knob_flags['kv_dtype']!r}) must be one of {', '.join(KV_DTYPES)}",
    )
    n = int(per_gpu or 0)
    given = None if offload in (AUTO, OFF) else WeightOffload.parse(offload)
    knobs = resolve_knobs(
        cost.engine, m, c, layout, **knob_flags, version=cost.engine_version, phase=phase,
        offload=given,
    )  # fmt: skip
    pm = PhaseModel(m, c, cost, layout, knobs, routing)
    eng = backend_or_none(cost.engine)
    can = c.gpu.host_link_bw is not None and (eng is None or eng.offload_blocker() is None)
    if given is None and offload == AUTO and can:
        chosen = pm.fit_offload(phase, n, context)
        if chosen is not None:
            knobs = replace(knobs, offload=chosen)
            pm = PhaseModel(m, c, cost, layout, knobs, routing)
    r = pm.step(phase, n, context)
    return {
        "model": m.name,
        "cluster": c.name,
        "engine": engine,
        "label": layout.label,
        "gpus": layout.gpus,
        "layout": layout.to_dict(),
        "knobs": knobs.to_dict(),
        **_result(r, phase, n, context),
        "weight_offload": offload_answer(pm, r, phase, n, context, given is not None),
        "routing": "balanced (static profile)" if routing is None else routing.source,
        "note": "steady state of this phase alone, per GPU (busiest GPU's step), no arrivals",
        "pricing": pricing(cost),
        "price_sources": phase_price_sources(m, c, cost, layout, knobs, routing, phase, n, context),
    }


def offload_answer(
    pm: PhaseModel, r: PhaseResult, phase: str, per_gpu: int, context: int, given: bool
) -> dict[str, Any] | None:
    """The weight offload the step priced (None: none): its flags, whether given or chosen,
    why (the memory without it) and its price (the copies per forward pass over the host
    link, the step's wait for them)."""
    off = pm.knobs.offload
    if off is None:
        return None
    m, lay, gpu = pm.model, pm.layout, pm.cluster.gpu
    local = (m.num_experts + lay.redundant_experts) / lay.moe_ep
    om = offload_memory(m, off, range(m.num_layers), local, lay.moe_tp)
    secs, layers = pm.offload_transfers(off)
    without = pm.memory_need(phase, per_gpu, context, None)
    gib = 1024**3
    wait = r.breakdown.get("offload", 0.0)
    return {
        "flags": off.label,
        "group_size": off.group_size,
        "num_in_group": off.num_in_group,
        "prefetch_step": off.prefetch_step,
        "chosen": "given" if given else "auto",
        "layers": list(layers),
        "offloaded_gib_per_gpu": om.offloaded / gib,
        "prefetch_buffers_gib": om.buffers / gib,
        "need_without_gib_per_gpu": without / gib,
        "host_link_gb_per_s": (gpu.host_link_bw or 0.0) / 1e9,
        "transfer_ms_per_pass": sum(secs) * 1e3,
        "wait_ms": wait * 1e3,
        "why": (
            f"without it the step needs {without / gib:.1f} GiB per GPU, {gpu.name} has "
            f"{gpu.mem_bytes / gib:.1f}; {len(layers)} of {m.num_layers} layers offloaded "
            f"({om.offloaded / gib:.1f} GiB of routed experts on the host, "
            f"{om.buffers / gib:.1f} GiB of prefetch buffers on the GPU)"
        ),
        "price": (
            f"{sum(secs) * 1e3:.1f} ms of copies per forward pass at "
            f"{(gpu.host_link_bw or 0.0) / 1e9:.0f} GB/s per direction, prefetched "
            f"{off.prefetch_step} offloaded layer(s) ahead: the step waits {wait * 1e3:.1f} ms"
        ),
    }


def _result(r: PhaseResult, phase: str, per_gpu: int, context: int) -> dict[str, Any]:
    """The fixed JSON keys of a phase answer (module docstring), times in ms."""
    return {
        "phase": phase,
        "step_ms": r.step_s * 1e3,
        "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu,
        "tokens_kind": "output tokens" if phase == "decode" else "prompt tokens",
        ("batch_per_gpu" if phase == "decode" else "tokens_per_gpu"): per_gpu,
        "context": context,
        "tokens_per_step": r.tokens_per_step,
        "busiest_rank_imbalance": r.imbalance,
        "breakdown_ms": {k: v * 1e3 for k, v in r.breakdown.items()},
        "memory_gib_per_gpu": {k: v / 1024**3 for k, v in r.memory_bytes.items()},
    }


def iterations_trace(sim: Any, m: ModelSpec, c: ClusterSpec, layout: Layout) -> str:
    """The Chrome trace JSON of a simulation's iterations (``--trace-out``)."""
    from moeplan.serve import serve_trace

    meta = {"model": m.name, "cluster": c.name}
    return json.dumps(serve_trace(sim, label=layout.label, metadata=meta))
