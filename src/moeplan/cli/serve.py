"""``moeplan serve-sim``: simulate serving one deployment under load (TTFT, TPOT, tokens/s/GPU).

The deployment is given by layout flags (``--attn-tp --attn-dp --moe-tp --moe-ep --pp``) or by
a ``plan.json`` (``--plan``; families ``strategy`` and ``pipeline``; a FinDEP ``dep`` plan is
attention–FFN disaggregated and is not simulated by this engine model, said in one line), or
is a prefill/decode pair of pools (``--pd``, :mod:`moeplan.cli.serve_pd`).
Thin: parse → specs → :func:`moeplan.serve.evaluate_layout` → print. The engine knobs
(running-request cap, prefill chunk) are searched unless given; without ``--rate`` or
``--concurrency`` the workload is simulated at the largest Poisson rate that meets the SLOs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any

import typer

from moeplan.cli._common import (
    QuietOpt,
    Table,
    console,
    err_console,
    fmt_time,
    fmt_times,
    print_json,
    progress,
    write_atomic,
)
from moeplan.cli.serve_pd import PD_HELP, check_pd_flags, read_pd, show_pd
from moeplan.cli.serve_plan import ServedDeployment, served_deployment
from moeplan.errors import MoeplanError, check_int, require
from moeplan.io import check_target
from moeplan.planners.plan import Plan
from moeplan.search.capacity import DEFAULT_REQUESTS, steady_probe
from moeplan.search.search import ENGINES, ServeResult, evaluate_layout, run_workload
from moeplan.search.sim_capacity import layout_capacity
from moeplan.search.space_rank import replicated, require_steady, serve_result
from moeplan.serve import SLO, IterationModel, LengthDist, ServeLayout, ServeWorkload, serve_trace
from moeplan.specs import load_cluster, load_model
from moeplan.specs.cluster import MAX_GPUS_PER_NODE, MAX_NODES
from moeplan.specs.hf_config import read_json_file

DEFAULT_TTFT_SLO_MS = 2000.0  # same defaults as ``moeplan plan``
DEFAULT_TPOT_SLO_MS = 100.0
MAX_REQUESTS = 200_000
MAX_THINK_MS = 3_600_000.0  # one hour: bounds the simulated clock; no interactive client idles longer
LAYOUT_FLAGS = ("attn_tp", "attn_dp", "moe_tp", "moe_ep", "pp", "micro_batches")


def layout_from_plan(plan: Plan) -> ServeLayout:
    """The serving layout of a ``strategy`` or ``pipeline`` plan (pipeline: each block's most
    common module choice over all stages, DPMoE counted into the MoE EP span)."""
    pools = plan.details.get("disaggregation")
    if pools is not None:  # PD / AFD pools, not one engine
        kind = pools.get("kind") if isinstance(pools, dict) else pools
        raise MoeplanError(
            f"plan.details.disaggregation ({kind}) is a disaggregated deployment: serve-sim "
            "simulates one engine; `moeplan plan` simulates its prefill and decode pools"
        )
    read = PLAN_LAYOUTS.get(plan.family)
    if read is not None:
        return read(plan)
    raise MoeplanError(
        f"plan.family ({plan.family!r}) is not simulated by serve-sim: only "
        "strategy and pipeline plans (attention-FFN disaggregated serving of a "
        "dep plan is not modelled); give the layout with --attn-tp ... instead"
    )


# a parallel degree past every GPU a cluster spec can hold is corrupt (specs/cluster.py)
MAX_DEGREE = MAX_NODES * MAX_GPUS_PER_NODE
MODULE_KINDS = ("attn", "moe", "mlp")  # what the pipeline planner writes (planners/pipeline)


def _degree(field: str, value: Any) -> int:
    """A parallel degree read from plan.json: a JSON integer in 1..MAX_DEGREE (no strings,
    fractions or booleans: a plan moeplan wrote holds integers)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MoeplanError(f"plan.layout.{field} ({value!r}) must be an integer")
    return check_int(f"plan.layout.{field}", value, 1, MAX_DEGREE)


def _section(lay: Any, key: str) -> dict:
    require(isinstance(lay, dict), "plan.layout must be a JSON object")
    sec = lay.get(key)
    require(isinstance(sec, dict), f"plan.layout.{key} ({sec!r}) must be a JSON object")
    return sec


def _strategy_layout(plan: Plan) -> ServeLayout:
    """A strategy plan's serving layout: its degrees, fused as MixServe chose."""
    lay = plan.layout
    attn, moe = _section(lay, "attn"), _section(lay, "moe")
    return ServeLayout(
        attn_tp=_degree("attn.tp", attn.get("tp")),
        attn_dp=_degree("attn.dp", attn.get("dp")),
        moe_tp=_degree("moe.tp", moe.get("tp")),
        moe_ep=_degree("moe.ep", moe.get("ep")),
        pp=_degree("pp", lay.get("pp", 1)),
        fused=plan.details.get("fused") is True,
    )


def _pipeline_layout(lay: Any) -> ServeLayout:
    """A pipeline plan's serving layout: each block's most common module choice."""
    require(isinstance(lay, dict), "plan.layout must be a JSON object")
    stages = lay.get("stages")
    require(
        isinstance(stages, list) and len(stages) >= 1,
        "plan.layout.stages must be a non-empty list",
    )
    attn, moe = [], []
    for j, st in enumerate(stages):
        mods = st.get("modules") if isinstance(st, dict) else None
        require(
            isinstance(mods, list) and len(mods) >= 1,
            f"plan.layout.stages[{j}].modules must be a non-empty list",
        )
        for i, m in enumerate(mods):
            where = f"stages[{j}].modules[{i}]"
            require(isinstance(m, dict), f"plan.layout.{where} must be a JSON object")
            kind = m.get("kind")
            require(kind in MODULE_KINDS, f"plan.layout.{where}.kind ({kind!r}) must be one of "
                    f"{', '.join(MODULE_KINDS)}")
            tp, dp = _degree(f"{where}.tp", m.get("tp")), _degree(f"{where}.dpmoe", m.get("dpmoe"))
            if kind == "attn":
                attn.append((tp, dp))
            elif kind == "moe":
                moe.append((tp, _degree(f"{where}.ep", m.get("ep")) * dp))
    a = max(set(attn), key=attn.count) if attn else (1, 1)
    e = max(set(moe), key=moe.count) if moe else a
    pp = _degree("pp", lay.get("pp"))
    require(pp == len(stages), f"plan.layout.pp ({pp}) must equal its stages ({len(stages)})")
    return ServeLayout(attn_tp=a[0], attn_dp=a[1], moe_tp=e[0], moe_ep=e[1], pp=pp)


#: How ``serve-sim --plan`` reads one engine's layout from each family's plan, keyed by family
#: (:data:`moeplan.planners.families.INSTANCE_SERVED`).
PLAN_LAYOUTS: dict[str, Callable[[Plan], ServeLayout]] = {
    "strategy": _strategy_layout,
    "pipeline": lambda plan: _pipeline_layout(plan.layout),
}


def _lengths(fixed: int | None, dist: str | None, name: str, default: int) -> LengthDist:
    require(fixed is None or dist is None, f"--{name} and --{name}-dist are exclusive")
    require(fixed is None or fixed >= 1, f"--{name} ({fixed}) must be >= 1")
    return LengthDist.parse(dist) if dist else LengthDist(mean=fixed or default)


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


def _metrics_dict(r: ServeResult, rate: float | None) -> dict[str, Any]:
    m: dict[str, Any] = r.metrics.to_dict() if r.metrics is not None else {}
    m["max_rate_meeting_slo_rps"] = r.max_rate_meeting_slo_rps
    m["rate_simulated_rps"] = rate
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in m.items()}


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


def serve_sim(
    model: Annotated[
        str | None, typer.Option(help="Model preset or config.json (default: the plan's).")
    ] = None,
    cluster: Annotated[
        str | None, typer.Option(help="Cluster preset (default: the plan's).")
    ] = None,
    nodes: Annotated[int | None, typer.Option(help="Override the cluster's node count.")] = None,
    plan: Annotated[
        str | None,
        typer.Option(
            help="plan.json to simulate (strategy or pipeline); one from moeplan plan is "
            "simulated as it served it: instance, replicas, knobs, chunk and running cap."
        ),
    ] = None,
    pd: Annotated[str | None, typer.Option(help=PD_HELP)] = None,
    attn_tp: Annotated[int | None, typer.Option(help="Attention TP degree (default 1).")] = None,
    attn_dp: Annotated[int | None, typer.Option(help="Attention DP degree (default 1).")] = None,
    moe_tp: Annotated[int | None, typer.Option(help="MoE TP degree (default 1).")] = None,
    moe_ep: Annotated[int | None, typer.Option(help="MoE EP degree (default 1).")] = None,
    pp: Annotated[int | None, typer.Option(help="Pipeline stages (default 1).")] = None,
    micro_batches: Annotated[
        int | None, typer.Option(help="Micro-batches in flight with PP (default pp).")
    ] = None,
    replicas: Annotated[
        int | None,
        typer.Option(
            help="Copies of the instance fed round-robin (--rate is their total); figures per "
            "GPU are one instance's, as moeplan plan reports a replicated deployment "
            "(default 1, or the plan's)."
        ),
    ] = None,
    rate: Annotated[float | None, typer.Option(help="Poisson arrival rate, requests/s.")] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Closed loop: clients, one request in flight each.")
    ] = None,
    think_ms: Annotated[
        float,
        typer.Option(
            help="Closed loop: mean think time (ms, exponential) before each client's next "
            "request; 0 = resend at once, as bench_serving --max-concurrency."
        ),
    ] = 0.0,
    arrival: Annotated[str, typer.Option(help="poisson or gamma (bursty, see --cv).")] = "poisson",
    cv: Annotated[
        float, typer.Option(help="Gamma arrivals: coefficient of variation of the gaps.")
    ] = 1.0,
    isl: Annotated[
        int | None, typer.Option(help="Prompt tokens per request (default 2048).")
    ] = None,
    osl: Annotated[
        int | None, typer.Option(help="Output tokens per request (default 256).")
    ] = None,
    isl_dist: Annotated[
        str | None,
        typer.Option(help="Prompt lengths: N, uniform:LO:HI, lognormal:MEDIAN:SIGMA[:MAX]."),
    ] = None,
    osl_dist: Annotated[
        str | None, typer.Option(help="Output lengths (same forms as --isl-dist).")
    ] = None,
    prefix_hit: Annotated[
        float, typer.Option(help="Fraction of every prompt found in the prefix cache.")
    ] = 0.0,
    ttft_slo: Annotated[
        float, typer.Option(help="TTFT SLO in ms (at --slo-percentile).")
    ] = DEFAULT_TTFT_SLO_MS,
    tpot_slo: Annotated[
        float, typer.Option(help="TPOT SLO in ms (at --slo-percentile).")
    ] = DEFAULT_TPOT_SLO_MS,
    slo_percentile: Annotated[
        float, typer.Option(help="Percentile the SLOs bind: 50, 90 or 99.")
    ] = 90.0,
    engine: Annotated[
        str,
        typer.Option(
            help="Engine modelled: sglang or vllm — its scheduler and, unless --cost-engine "
            "none, its measured kernels (as `moeplan plan`)."
        ),
    ] = "sglang",
    cost_engine: Annotated[
        str,
        typer.Option(
            help="'engine' (price kernels from the engine's measured tables) or 'none' "
            "(the calibrated GEMM/NCCL model alone)."
        ),
    ] = "engine",
    chunk_tokens: Annotated[
        int | None, typer.Option(help="Prefill chunk / token budget (default: searched).")
    ] = None,
    max_running: Annotated[
        int | None, typer.Option(help="Running-request cap (default: searched).")
    ] = None,
    requests: Annotated[
        int,
        typer.Option(
            help="Requests measured per steady capacity probe (warm-up and drain requests "
            "come on top; the same default as moeplan plan)."
        ),
    ] = DEFAULT_REQUESTS,
    seed: Annotated[int, typer.Option(help="Seed of arrivals and lengths.")] = 0,
    profile: Annotated[
        str | None, typer.Option(help="HardwareProfile (default: the cluster's).")
    ] = None,
    trace_out: Annotated[
        str | None, typer.Option(help="Write a Chrome trace of the iterations here.")
    ] = None,
    phase: Annotated[
        str | None,
        typer.Option(help="prefill or decode: the steady step of that phase alone, per GPU."),
    ] = None,
    batch_per_gpu: Annotated[
        int | None, typer.Option(help="--phase decode: sequences per GPU.")
    ] = None,
    tokens_per_gpu: Annotated[
        int | None, typer.Option(help="--phase prefill: prompt tokens per GPU (prompts of --isl).")
    ] = None,
    context: Annotated[
        int | None, typer.Option(help="--phase decode: KV tokens per sequence.")
    ] = None,
    redundant_experts: Annotated[
        int, typer.Option(help="Redundant expert replicas per MoE layer (EPLB).")
    ] = 0,
    tbo: Annotated[
        bool | None,
        typer.Option("--tbo/--no-tbo", help="Two-batch overlap (default off, as the engines)."),
    ] = None,
    mtp: Annotated[
        int, typer.Option(help="MTP draft tokens per decode step (0: off; needs --mtp-accept).")
    ] = 0,
    mtp_accept: Annotated[
        float | None, typer.Option(help="Acceptance rate of each MTP draft token, in (0, 1].")
    ] = None,
    kv_dtype: Annotated[str, typer.Option(help="KV cache dtype: auto, bf16 or fp8.")] = "auto",
    a2a: Annotated[
        str,
        typer.Option(help="MoE all-to-all: auto (DeepEP where it can run), deepep, nccl."),
    ] = "auto",
    routing_trace: Annotated[
        str | None,
        typer.Option(help="Routing trace: per-expert loads, placed by EPLB with the replicas."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Simulate serving one deployment: TTFT/TPOT/ITL/E2E percentiles, tokens/s per GPU,
    goodput and the largest request rate that meets the SLOs; with ``--phase``, the steady
    step of one phase alone per GPU."""
    if trace_out:
        check_target(trace_out)  # not a device, FIFO or folder: refused before the work
    from moeplan.cli.serve_phase import check_phase_flags, run_phase_flags

    phase_ctx = check_phase_flags(phase, batch_per_gpu, tokens_per_gpu, context, isl)
    require(redundant_experts >= 0, f"--redundant-experts ({redundant_experts}) must be >= 0")
    flags = dict(
        zip(LAYOUT_FLAGS, (attn_tp, attn_dp, moe_tp, moe_ep, pp, micro_batches), strict=True)
    )
    deployment = None
    if pd is not None:
        check_pd_flags(flags, plan, concurrency, chunk_tokens, max_running, trace_out)
        knob_given = {"--phase": phase, "--redundant-experts": redundant_experts or None,
                      "--tbo/--no-tbo": tbo,
                      "--kv-dtype": None if kv_dtype == "auto" else kv_dtype,
                      "--a2a": None if a2a == "auto" else a2a}
        bad = [k for k, v in knob_given.items() if v is not None]
        require(not bad, f"{bad[0] if bad else ''} does not apply to --pd (each pool runs the "
                "engine's all-to-all and the better two-batch overlap setting; redundant experts "
                "go in the layout: moe-rN; --mtp applies to the decode pool)")
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
        a2a, tbo, kv_dtype = _plan_knobs(served, a2a, tbo, kv_dtype)
    replicas = 1 if replicas is None else replicas
    if redundant_experts and deployment is None:
        layout = replace(layout, redundant_experts=redundant_experts)
    require(bool(model or the_plan), "--model is required without --plan")
    require(bool(cluster or the_plan), "--cluster is required without --plan")
    m = load_model(model or the_plan.model)  # type: ignore[union-attr]
    c = load_cluster(cluster or the_plan.cluster, nodes)  # type: ignore[union-attr]
    knob_flags = dict(a2a=a2a, tbo=tbo, mtp=mtp, mtp_accept=mtp_accept, kv_dtype=kv_dtype)
    from moeplan.cli.serve_phase import trace_routing

    routing = trace_routing(routing_trace, m) if routing_trace else None
    if phase is not None:
        run_phase_flags(
            m, c, layout, engine=engine, cost_engine=cost_engine, profile=profile, phase=phase,
            per_gpu=batch_per_gpu if phase == "decode" else tokens_per_gpu, context=phase_ctx,
            knob_flags=knob_flags, json_out=json_out, routing=routing,
        )  # fmt: skip
        return
    _check_flags(engine, rate, concurrency, requests, chunk_tokens, max_running, arrival, cv)
    require(ttft_slo > 0 and tpot_slo > 0, "--ttft-slo and --tpot-slo must be positive (ms)")
    require(
        slo_percentile in (50.0, 90.0, 99.0),
        f"--slo-percentile ({slo_percentile}) must be 50, 90 or 99",
    )
    slo = SLO(ttft_s=ttft_slo / 1e3, tpot_s=tpot_slo / 1e3, percentile=slo_percentile)
    w = ServeWorkload(
        num_requests=requests,
        rate=None if concurrency else (rate or 1.0),
        concurrency=concurrency,
        arrival=arrival,
        cv=cv,
        isl=_lengths(isl, isl_dist, "isl", 2048),
        osl=_lengths(osl, osl_dist, "osl", 256),
        prefix_hit=prefix_hit,
        think_s=_think_s(think_ms, concurrency),
        seed=seed,
    )
    require(
        cost_engine in ("engine", "none"),
        f"--cost-engine ({cost_engine!r}) must be 'engine' or 'none'",
    )
    from moeplan.kernel_tables import engine_cost_model, pricing, pricing_line
    from moeplan.serve.instance_knobs import resolve_knobs

    cm = engine_cost_model(c, profile, engine=None if cost_engine == "none" else engine)
    if deployment is not None:
        mtp_knobs = resolve_knobs(cm.engine, m, c, deployment.prefill, mtp=mtp,
                                  mtp_accept=mtp_accept)  # validates --mtp/--mtp-accept
        return show_pd(deployment, m, c, cm, w, slo, engine=engine, rate=rate,
                       requests=requests, json_out=json_out,
                       render=(_payload, _print_human),
                       mtp=(mtp_knobs.mtp, mtp_knobs.mtp_accept))
    knobs = resolve_knobs(cm.engine, m, c, layout, **knob_flags)
    work = f"simulating {layout.label}" + ("" if rate or concurrency else ": SLO capacity search")
    with progress(not (quiet or json_out), work):
        if concurrency is not None:  # a closed loop: the knob search and one run, as before
            r = evaluate_layout(
                m, c, cm, layout, w, slo, engine=engine, chunk_tokens=chunk_tokens,
                max_running=max_running, search_requests=requests, knobs=knobs, routing=routing,
            )
            if not r.feasible:
                raise MoeplanError(r.reason)
            assert r.engine is not None
            ev = IterationModel(m, c, cm, layout, routing, knobs=knobs)
            sim, metrics = run_workload(r.engine, w, ev, layout.gpus, slo)
            r = replace(r, metrics=metrics, meets_slo=metrics.meets(slo))
            at, cap_rec = None, None
        else:  # SLO-bound capacity in steady state, the figure `moeplan plan` ranks by
            require(replicas >= 1, f"--replicas ({replicas}) must be >= 1")
            cand = layout_capacity(
                m, c, cm, layout, w, slo, engine=engine, requests=requests, replicas=replicas,
                chunk_tokens=chunk_tokens, max_running=max_running, knobs=knobs, routing=routing,
            )
            assert cand.capacity is not None
            require(
                rate is not None or cand.probe is not None,
                f"no rate meets the SLOs on {layout.label} in steady state: even a light load "
                "misses them; raise --ttft-slo/--tpot-slo or change the layout",
            )
            probe = _operating_probe(cand, w, slo, rate, requests)
            r = replicated(serve_result(cand, w, slo, rate is not None, probe=probe), replicas)
            at = rate if rate is not None else cand.capacity.rate_rps * replicas
            sim = probe.res
            cap_rec = cand.capacity.to_dict(w.osl.mean, layout.gpus)
            require_steady({**cap_rec, "layout": layout.label})
    out = _payload(m.name, c.name, r, w, slo, at, engine)
    out["replicas"] = 1 if concurrency is not None else replicas  # copies of this instance
    out["capacity"] = cap_rec
    from moeplan.cost.mixer_prices import stand_in_fields

    out["knobs"] = knobs.to_dict()
    from moeplan.cost.provenance import quant_vs_bf16
    from moeplan.search.outcome import quant_sentence

    qw = quant_sentence(quant_vs_bf16(cm, m, ep=layout.moe_ep, tp=layout.moe_tp))
    out["warnings"] = [qw] if qw else []
    out["pricing"] = {**pricing(cm), **stand_in_fields(m, cm.engine is not None)}  # kernels; stand-in layers
    if trace_out:
        meta = {"model": m.name, "cluster": c.name}
        write_atomic(trace_out, json.dumps(serve_trace(sim, label=layout.label, metadata=meta)))
        out["trace"] = trace_out
    if json_out:
        print_json(out)
    else:
        _print_human(out, r)
        if knobs.mtp:
            console.print(
                f"MTP: {knobs.mtp} draft token(s) per step, acceptance {knobs.mtp_accept:g} (given) "
                f"-> {knobs.tokens_per_step:.3g} tokens per decode step in expectation; ITL is "
                "the gap between steps, TPOT the time per output token"
            )
        console.print(pricing_line(out["pricing"]))
        if out["pricing"]["stand_in_note"]:
            console.print(out["pricing"]["stand_in_note"])
        for line in out["warnings"]:
            err_console.print(f"[yellow]warning:[/] {line}")


def _plan_knobs(
    served: ServedDeployment, a2a: str, tbo: bool | None, kv_dtype: str
) -> tuple[str, bool | None, str]:
    """The plan's all-to-all backend, two-batch overlap and KV dtype, unless a flag is given."""
    k = served.knobs or {}
    return (
        str(k.get("a2a", a2a)) if a2a == "auto" else a2a,
        bool(k.get("tbo")) if tbo is None and "tbo" in k else tbo,
        str(k.get("kv_dtype", kv_dtype)) if kv_dtype == "auto" else kv_dtype,
    )


def _operating_probe(cand: Any, w: ServeWorkload, slo: SLO, rate: float | None, requests: int):
    """The steady run the metrics come from: at ``rate``, else the probe at capacity."""
    if rate is None:
        return cand.probe
    return steady_probe(
        cand.cfg, cand.evaluate, w, slo, rate / cand.replicas, requests=requests,
        replicas=cand.replicas,
    )


def _check_flags(
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


def _payload(
    model: str,
    cluster: str,
    r: ServeResult,
    w: ServeWorkload,
    slo: SLO,
    rate: float | None,
    engine: str,
) -> dict[str, Any]:
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


def _ms(v: Any) -> str:
    return "—" if v is None else fmt_time(float(v))


def _print_human(out: dict[str, Any], r: ServeResult) -> None:
    m, e, w = out["metrics"], out["engine"], out["workload"]
    load = (
        f"{w['rate_rps']:.3g} req/s Poisson"
        if w["rate_rps"]
        else f"{w['concurrency']} clients (closed loop, "
        + (f"{w['think_s'] * 1e3:g} ms mean think time)" if w["think_s"] else "no think time)")
    )
    n = out.get("replicas", 1)
    copies = f" x{n} replicas ({out['gpus'] * n} GPUs in all)" if n > 1 else ""
    console.print(
        f"[bold]{out['model']}[/] on [bold]{out['cluster']}[/], {out['label']} "
        f"({out['gpus']} GPUs){copies}, {e['name']} scheduler ({e['policy']}, chunk "
        f"{e['chunk_tokens']} tokens, cap {e['max_running']} requests), {load}, "
        f"{w['requests']} requests (simulated; times from the cost model)."
    )
    t = Table(title="Latency per request (simulated; one unit per row)")
    for col in ("metric", "p50", "p90", "p99"):
        t.add_column(col, justify="right" if col != "metric" else "left")
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2e")):
        unit, texts = fmt_times([m.get(f"{key}_p{p}_s") for p in (50, 90, 99)])
        t.add_row(f"{name} ({unit})", *texts)
    console.print(t)
    g = out["gpus"] * out.get("replicas", 1)  # the rate is all replicas'
    rows = [
        ("output tokens/s (total)", f"{m['output_tokens_per_s']:,.0f}"),
        ("output tokens/s per GPU", f"{m['output_tokens_per_s_per_gpu']:,.1f}"),
        ("prompt+output tokens/s per GPU", f"{m['total_tokens_per_s_per_gpu']:,.1f}"),
        (
            "goodput (requests/s meeting both SLOs)",
            f"{m['goodput_rps']:.3f} "
            f"({m['goodput_rps_per_gpu']:.4f} per GPU, {100 * m['slo_attainment']:.1f} % of requests)",
        ),
        (
            "largest Poisson rate meeting the SLOs",
            "—"
            if m["max_rate_meeting_slo_rps"] is None
            else f"{m['max_rate_meeting_slo_rps']:.3g} req/s ({m['max_rate_meeting_slo_rps'] / g:.3g} per GPU)",
        ),
        (
            "KV cache",
            f"{m['kv_capacity_tokens']:,} tokens pooled, mean use "
            f"{100 * m['kv_utilisation']:.1f} %, peak {100 * m['kv_peak_utilisation']:.1f} %",
        ),
        ("preemptions (recomputed tokens)", f"{m['preemptions']} ({m['recomputed_tokens']:,})"),
    ]
    for k, v in rows:
        console.print(f"  {k}: [bold]{v}[/]")
    slo = out["slo"]
    p = int(slo["percentile"])
    verdict = "[green]meets[/]" if r.meets_slo else "[red]misses[/]"
    console.print(
        f"SLOs at p{p}: TTFT {m[f'ttft_p{p}_s'] * 1e3:.1f} / {slo['ttft_s'] * 1e3:.0f} ms, "
        f"TPOT {m[f'tpot_p{p}_s'] * 1e3:.1f} / {slo['tpot_s'] * 1e3:.0f} ms: {verdict}. "
        f"Bound at the operating point: {r.bound}."
    )
    if "trace" in out:
        console.print(f"Chrome trace: {out['trace']}")


def register(app: typer.Typer) -> None:
    app.command("serve-sim")(serve_sim)
