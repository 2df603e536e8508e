"""``moeplan serve-sim``: simulate serving one deployment under load (TTFT, TPOT, tokens/s/GPU).

The deployment is given by layout flags (``--attn-tp --attn-dp --moe-tp --moe-ep --pp``) or by
a ``plan.json`` (``--plan``; families ``strategy`` and ``pipeline``; a FinDEP ``dep`` plan is
attention–FFN disaggregated and is not simulated by this engine model, said in one line), or
is a prefill/decode pair of pools (``--pd``, grammar: :mod:`moeplan.serve.pools.pd_spec`).
Thin: parse and check (:mod:`moeplan.commands.serve_inputs`) → specs → one layout, a P/D pair
or one phase (:mod:`moeplan.commands.serve_sim`) → print (:mod:`moeplan.cli.serve_print`)
and the Chrome trace. The engine knobs
(running-request cap, prefill chunk) are searched unless given; without ``--rate`` or
``--concurrency`` the workload is simulated at the largest Poisson rate that meets the SLOs.
"""

from __future__ import annotations

from typing import Annotated

import typer

from moeplan.cli import _common as opt
from moeplan.cli._common import (
    QuietOpt,
    given_on_command_line,
    print_json,
    progress,
    write_atomic,
)
from moeplan.cli.serve_print import print_launch, print_pd, print_phase, print_single
from moeplan.commands.serve_inputs import (
    DEFAULT_TPOT_SLO_MS,
    DEFAULT_TTFT_SLO_MS,
    ServeSimFlags,
    prepare,
    sim_inputs,
)
from moeplan.commands.workers import workers
from moeplan.io import check_target
from moeplan.search.capacity.slo import DEFAULT_REQUESTS

PD_HELP = (
    "Simulate a P/D deployment: 'X*LAYOUT:Y*LAYOUT' (X prefill instances of one layout, Y "
    "decode instances of another) or a P/D plan.json. LAYOUT = dot-separated attn-tpN, "
    "attn-dpN, moe-tpN, moe-epN, moe-rN (redundant experts), ppN, mbN (micro-batches), "
    "dense-tpN, fused (MixServe AR-A2A); omitted degrees are 1; or agN.egN (an "
    "attention-FFN disaggregated decode instance). E.g. 3*attn-dp8.moe-ep8:1*ag2.eg6 "
    "or 2*attn-dp8.moe-ep8:1*attn-tp2.moe-tp2. Needs an open workload (--rate or the "
    "SLO-rate search); excludes --plan and the layout flags."
)

__all__ = ["register", "serve_sim"]


def serve_sim(
    ctx: typer.Context,
    model: Annotated[
        str | None,
        typer.Option(help="Model preset, config.json or checkpoint folder (default: the plan's)."),
    ] = None,
    cluster: Annotated[
        str | None, typer.Option(help="Cluster preset (default: the plan's).")
    ] = None,
    nodes: opt.NodesOpt = None,
    racks: opt.RacksOpt = None,
    plan: Annotated[
        str | None,
        typer.Option(
            help="plan.json to simulate (strategy or pipeline); one from moeplan plan is "
            "simulated as it served it: instance, replicas, knobs, chunk and running cap."
        ),
    ] = None,
    pd: Annotated[str | None, typer.Option(help=PD_HELP)] = None,
    launch: Annotated[
        str | None,
        typer.Option(
            help="An engine's own launch command, quoted ('vllm serve M -tp 4 ...', 'python -m "
            "sglang.launch_server ...', 'trtllm-serve M ...'): its model, engine, layout and "
            "instance knobs, read exactly (unknown flags refused; unpriced ones reported)."
        ),
    ] = None,
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
    ttft_slo: opt.TtftSloOpt = DEFAULT_TTFT_SLO_MS,
    tpot_slo: opt.TpotSloOpt = DEFAULT_TPOT_SLO_MS,
    slo_percentile: opt.SloPercentileOpt = 90.0,
    engine: Annotated[
        str,
        typer.Option(
            help="Engine modelled: sglang, vllm or trtllm — its scheduler and, unless --cost-engine "
            "none, its measured kernels (as `moeplan plan`)."
        ),
    ] = "sglang",
    cost_engine: opt.CostEngineOpt = "engine",
    engine_version: opt.EngineVersionOpt = None,
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
    profile: opt.ProfileOpt = None,
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
    overlap_schedule: Annotated[
        bool | None,
        typer.Option(
            "--overlap-schedule/--no-overlap-schedule",
            help="The scheduler's host work overlapped with the GPU step (vLLM "
            "--async-scheduling, SGLang's overlap scheduler); default: the engine release's.",
        ),
    ] = None,
    mtp: opt.MtpOpt = 0,
    mtp_accept: opt.MtpAcceptOpt = None,
    kv_dtype: opt.KvDtypeOpt = "auto",
    mem_fraction: opt.MemFractionOpt = None,
    a2a: Annotated[
        str,
        typer.Option(help="MoE all-to-all: auto (DeepEP where it can run), deepep, nccl."),
    ] = "auto",
    routing_trace: Annotated[
        str | None,
        typer.Option(help="Routing trace: per-expert loads, placed by EPLB with the replicas."),
    ] = None,
    routing: opt.RoutingOpt = "random",
    weight_offload: Annotated[
        str,
        typer.Option(
            help="--phase: weights offloaded to host memory, GROUP:NUM[:PREFETCH] as the "
            "engine's --offload-group-size/--offload-num-in-group/--offload-prefetch-step "
            "(e.g. 2:1:1); auto: the smallest that fits when the weights do not; off: none."
        ),
    ] = "auto",
    json_out: opt.JsonOpt = False,
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
    values = {k: v for k, v in locals().items() if k not in ("ctx", "json_out", "quiet", "launch")}
    launched = None
    if launch is not None:
        from moeplan.commands.launch_flags import apply_launch, launch_report

        values, settings = apply_launch(launch, values, given=given_on_command_line(ctx))
        launched = launch_report(launch, settings)
        engine, mtp, model = values["engine"], values["mtp"], values["model"]
    f = ServeSimFlags(**values)
    s = prepare(f)
    m, c, d, n_jobs = s.model, s.cluster, s.deployment, s.jobs
    if phase is not None:
        from moeplan.commands.serve_sim import phase_answer

        out = phase_answer(
            m, c, d.layout, engine=(engine, engine_version), cost_engine=cost_engine,
            profile=profile, phase=phase,
            per_gpu=batch_per_gpu if phase == "decode" else tokens_per_gpu,
            context=s.phase_context, knob_flags=s.knob_flags, routing=s.routing,
            offload=weight_offload,
        )  # fmt: skip
        if launched:
            out["launch"] = launched
        if json_out:
            print_json(out)
        else:
            print_phase(out)
            print_launch(launched)
        return
    slo, w, cm = sim_inputs(f, s)
    from moeplan.commands.serve_sim import iterations_trace, simulate_pd, simulate_single

    if d.pd is not None:
        with workers(n_jobs, carry=[cm]):
            pools, out = simulate_pd(d.pd, m, c, cm, w, slo, engine=engine, rate=rate,
                                 requests=requests, mtp=mtp, mtp_accept=mtp_accept,
                                 mem_fraction=mem_fraction)  # fmt: skip
        if launched:
            out["launch"] = launched
        if json_out:
            print_json(out)
        else:
            print_pd(out, d.pd, pools)
            print_launch(launched)
        return
    closed = w.concurrency is not None
    work = f"simulating {d.layout.label}" + ("" if rate or closed else ": SLO capacity search")
    with workers(n_jobs, carry=[cm]), progress(not (quiet or json_out), work):
        out, r, sim, knobs = simulate_single(m, c, cm, d, w, slo, s.knob_flags, engine=engine,
                                             rate=rate, routing=s.routing)  # fmt: skip
    if trace_out:
        write_atomic(trace_out, iterations_trace(sim, m, c, d.layout))
        out["trace"] = trace_out
    if launched:
        out["launch"] = launched
    if json_out:
        print_json(out)
    else:
        print_single(out, r, knobs)
        print_launch(launched)


def register(app: typer.Typer) -> None:
    app.command("serve-sim")(serve_sim)
