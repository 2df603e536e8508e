"""``moeplan serve-sim``: simulate serving one deployment under load (TTFT, TPOT, tokens/s/GPU).

The deployment is given by layout flags (``--attn-tp --attn-dp --moe-tp --moe-ep --pp``) or by
a ``plan.json`` (``--plan``; families ``strategy`` and ``pipeline``; a FinDEP ``dep`` plan is
attention–FFN disaggregated and is not simulated by this engine model, said in one line), or
is a prefill/decode pair of pools (``--pd``, :mod:`moeplan.cli.serve_pd`).
Thin: parse and check (:mod:`moeplan.cli.serve_checks`) → specs → one layout
(:mod:`moeplan.cli.serve_single`), a P/D pair or one phase → print
(:mod:`moeplan.cli.serve_print`). The engine knobs
(running-request cap, prefill chunk) are searched unless given; without ``--rate`` or
``--concurrency`` the workload is simulated at the largest Poisson rate that meets the SLOs.
"""

from __future__ import annotations

from typing import Annotated

import typer

from moeplan.cli._common import QuietOpt
from moeplan.cli._fork import check_jobs, workers
from moeplan.cli._steady import check_rate
from moeplan.cli.serve_checks import (
    DEFAULT_TPOT_SLO_MS,
    DEFAULT_TTFT_SLO_MS,
    LAYOUT_FLAGS,
    check_fits_cluster,
    check_flags,
    resolve_deployment,
    serve_inputs,
)
from moeplan.cli.serve_pd import PD_HELP, show_pd
from moeplan.cli.serve_plan import PLAN_LAYOUTS, layout_from_plan
from moeplan.cli.serve_print import payload, print_human
from moeplan.errors import require
from moeplan.io import check_target
from moeplan.search.capacity.slo import DEFAULT_REQUESTS
from moeplan.specs import load_cluster, load_model

__all__ = ["PLAN_LAYOUTS", "layout_from_plan", "register", "serve_sim"]


def serve_sim(
    model: Annotated[
        str | None,
        typer.Option(help="Model preset, config.json or checkpoint folder (default: the plan's)."),
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
    jobs: Annotated[
        int | None,
        typer.Option(
            help="Worker processes for the capacity interval's independent runs (default: the "
            "CPUs this process may use; 1: none). The figures are the same for every value."
        ),
    ] = None,
) -> None:
    """Simulate serving one deployment: TTFT/TPOT/ITL/E2E percentiles, tokens/s per GPU,
    goodput and the largest request rate that meets the SLOs; with ``--phase``, the steady
    step of one phase alone per GPU."""
    if trace_out:
        check_target(trace_out)  # not a device, FIFO or folder: refused before the work
    from moeplan.cli.serve_phase import check_phase_flags, run_phase_flags, trace_routing

    phase_ctx = check_phase_flags(phase, batch_per_gpu, tokens_per_gpu, context, isl)
    flags = dict(
        zip(LAYOUT_FLAGS, (attn_tp, attn_dp, moe_tp, moe_ep, pp, micro_batches), strict=True)
    )
    d = resolve_deployment(
        pd, plan, flags, replicas=replicas, chunk_tokens=chunk_tokens, max_running=max_running,
        a2a=a2a, tbo=tbo, kv_dtype=kv_dtype, redundant_experts=redundant_experts, phase=phase,
        concurrency=concurrency, trace_out=trace_out,
    )  # fmt: skip
    require(bool(model or d.plan), "--model is required without --plan")
    require(bool(cluster or d.plan), "--cluster is required without --plan")
    m = load_model(model or d.plan.model)  # type: ignore[union-attr]
    c = load_cluster(cluster or d.plan.cluster, nodes)  # type: ignore[union-attr]
    require(
        replicas is None or concurrency is None,
        f"--replicas ({replicas}) applies to open workloads (--rate or the SLO-capacity "
        "search); a closed loop (--concurrency) drives one instance",
    )
    check_fits_cluster(d, c, one_instance=phase is not None or concurrency is not None)
    n_jobs = check_jobs(jobs)
    knob_flags = dict(a2a=d.a2a, tbo=d.tbo, mtp=mtp, mtp_accept=mtp_accept, kv_dtype=d.kv_dtype)
    routing = trace_routing(routing_trace, m) if routing_trace else None
    if phase is not None:
        run_phase_flags(
            m, c, d.layout, engine=engine, cost_engine=cost_engine, profile=profile, phase=phase,
            per_gpu=batch_per_gpu if phase == "decode" else tokens_per_gpu, context=phase_ctx,
            knob_flags=knob_flags, json_out=json_out, routing=routing,
        )  # fmt: skip
        return
    check_flags(engine, rate, concurrency, requests, d.chunk_tokens, d.max_running, arrival, cv)
    slo, w = serve_inputs(
        ttft_slo=ttft_slo, tpot_slo=tpot_slo, slo_percentile=slo_percentile, requests=requests,
        rate=rate, concurrency=concurrency, arrival=arrival, cv=cv,
        lengths=(isl, isl_dist, osl, osl_dist), prefix_hit=prefix_hit, think_ms=think_ms,
        seed=seed,
    )  # fmt: skip
    check_rate(rate, d.replicas if d.pd is None else 1, w, slo)  # P/D: one stream, both pools
    require(
        cost_engine in ("engine", "none"),
        f"--cost-engine ({cost_engine!r}) must be 'engine' or 'none'",
    )
    from moeplan.kernel_tables import engine_cost_model
    from moeplan.serve.iteration.instance_knobs import resolve_knobs

    cm = engine_cost_model(c, profile, engine=None if cost_engine == "none" else engine)
    if d.pd is not None:
        mtp_knobs = resolve_knobs(
            cm.engine, m, c, d.pd.prefill, mtp=mtp, mtp_accept=mtp_accept
        )  # validates --mtp/--mtp-accept
        with workers(n_jobs, carry=[cm]):
            return show_pd(d.pd, m, c, cm, w, slo, engine=engine, rate=rate,
                           requests=requests, json_out=json_out, render=(payload, print_human),
                           mtp=(mtp_knobs.mtp, mtp_knobs.mtp_accept))  # fmt: skip
    from moeplan.cli.serve_single import run_single

    knobs = resolve_knobs(cm.engine, m, c, d.layout, **knob_flags)
    with workers(n_jobs, carry=[cm]):
        run_single(m, c, cm, d, w, slo, knobs, engine=engine, rate=rate, routing=routing,
                   trace_out=trace_out, json_out=json_out, quiet=quiet)  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("serve-sim")(serve_sim)
