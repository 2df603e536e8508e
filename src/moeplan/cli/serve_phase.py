"""``moeplan serve-sim --phase {prefill,decode}``: one phase's steady step per GPU.

Thin: check the phase flags, build the layout and the instance knobs, call
:class:`moeplan.serve.iteration.phase.PhaseModel`, print. JSON keys (fixed): ``phase``, ``step_ms``,
``tokens_per_s_per_gpu``, ``batch_per_gpu`` (decode) or ``tokens_per_gpu`` (prefill),
``context``, ``breakdown_ms`` (``attention, moe, dispatch, combine, dense, other`` and, under
two-batch overlap, a negative ``overlap``; they sum to ``step_ms``).
"""

from __future__ import annotations

from typing import Any

from moeplan.cli._common import console, print_json
from moeplan.errors import require
from moeplan.serve.iteration.instance_knobs import KV_DTYPES, resolve_knobs
from moeplan.serve.iteration.phase import KEYS, PHASES, PhaseModel, PhaseResult
from moeplan.serve.layout import ServeLayout
from moeplan.specs import ClusterSpec, ModelSpec, RoutingProfile


def check_phase_flags(
    phase: str | None,
    batch_per_gpu: int | None,
    tokens_per_gpu: int | None,
    context: int | None,
    isl: int | None,
) -> int:
    """The phase's context (decode ``--context``, prefill ``--isl``); one-line errors."""
    if phase is None:
        for flag, v in (
            ("--batch-per-gpu", batch_per_gpu),
            ("--tokens-per-gpu", tokens_per_gpu),
            ("--context", context),
        ):
            require(v is None, f"{flag} ({v}) applies to --phase only")
        return 0
    require(phase in PHASES, f"--phase ({phase!r}) must be one of {', '.join(PHASES)}")
    if phase == "decode":
        require(batch_per_gpu is not None, "--phase decode needs --batch-per-gpu B")
        require(context is not None, "--phase decode needs --context C (KV tokens per request)")
        require(tokens_per_gpu is None, "--tokens-per-gpu applies to --phase prefill")
        return int(context)  # type: ignore[arg-type]
    require(tokens_per_gpu is not None, "--phase prefill needs --tokens-per-gpu T")
    require(batch_per_gpu is None, "--batch-per-gpu applies to --phase decode")
    require(context is None, "--phase prefill takes the prompt length from --isl, not --context")
    return int(isl or 2048)


def trace_routing(path: str, model: ModelSpec) -> RoutingProfile:
    """Per-expert loads per MoE layer counted from a routing trace (``.parquet`` / ``.npz``),
    the profile the busiest EP rank's load comes from (:mod:`moeplan.serve.iteration.balance`)."""
    import numpy as np

    from moeplan.traces.format import load_trace

    tr = load_trace(path, num_experts=model.num_experts)
    rows = []
    for layer in range(tr.experts.shape[1]):
        ids = tr.experts[:, layer, :].astype(np.int64)
        counts = np.bincount(ids[ids >= 0], minlength=model.num_experts)
        require(counts.sum() > 0, f"--routing-trace ({path}) layer {layer} routes no token")
        rows.append(tuple(float(x) for x in counts))
    return RoutingProfile(top_k=model.top_k, expert_load=tuple(rows), source=f"trace {path}")


def run_phase_flags(
    m: ModelSpec,
    c: ClusterSpec,
    layout: ServeLayout,
    *,
    engine: str,
    cost_engine: str,
    profile: str | None,
    phase: str,
    per_gpu: int | None,
    context: int,
    knob_flags: dict[str, Any],
    json_out: bool,
    routing: RoutingProfile | None,
) -> None:
    """``serve-sim --phase``: check the flags the phase reads, build the cost model, run."""
    from moeplan.kernel_tables import engine_cost_model
    from moeplan.search.colocated.evaluate import ENGINES

    layout.validate(m, c)
    require(engine in ENGINES, f"--engine ({engine!r}) must be one of {', '.join(ENGINES)}")
    require(
        cost_engine in ("engine", "none"),
        f"--cost-engine ({cost_engine!r}) must be 'engine' or 'none'",
    )
    cm = engine_cost_model(c, profile, engine=None if cost_engine == "none" else engine)
    run_phase(
        m, c, cm, layout, engine=engine, phase=phase, per_gpu=int(per_gpu or 0),
        context=context, knob_flags=knob_flags, json_out=json_out, routing=routing,
    )  # fmt: skip


def run_phase(
    m: ModelSpec,
    c: ClusterSpec,
    cost: Any,
    layout: ServeLayout,
    *,
    engine: str,
    phase: str,
    per_gpu: int,
    context: int,
    knob_flags: dict[str, Any],
    json_out: bool,
    routing: RoutingProfile | None = None,
) -> None:
    """Price the phase step and print it (JSON or a table)."""
    require(
        knob_flags["kv_dtype"] in KV_DTYPES,
        f"--kv-dtype ({knob_flags['kv_dtype']!r}) must be one of {', '.join(KV_DTYPES)}",
    )
    knobs = resolve_knobs(cost.engine, m, c, layout, **knob_flags)
    r = PhaseModel(m, c, cost, layout, knobs, routing).step(phase, per_gpu, context)
    out: dict[str, Any] = {
        "model": m.name,
        "cluster": c.name,
        "engine": engine,
        "label": layout.label,
        "gpus": layout.gpus,
        "layout": layout.to_dict(),
        "knobs": knobs.to_dict(),
        **_result(r, phase, per_gpu, context),
        "routing": "balanced (static profile)" if routing is None else routing.source,
        "note": "steady state of this phase alone, per GPU (busiest GPU's step), no arrivals",
    }
    from moeplan.kernel_tables import pricing, pricing_line

    out["pricing"] = pricing(cost)
    if json_out:
        print_json(out)
        return
    _print(out)
    console.print(pricing_line(out["pricing"]))


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


def _print(out: dict[str, Any]) -> None:
    knobs = ", ".join(f"{k}={v}" for k, v in out["knobs"].items() if v is not None)
    console.print(
        f"[bold]{out['model']}[/] on [bold]{out['cluster']}[/], {out['label']}, "
        f"{out['engine']} ({knobs}): {out['phase']} step, steady state of the phase alone, "
        "per GPU."
    )
    if out["phase"] == "decode":
        what = f"{out['batch_per_gpu']} sequences at KV {out['context']}"
    else:
        what = f"{out['tokens_per_gpu']} prompt tokens in prompts of {out['context']}"
    console.print(
        f"  {what}: step [bold]{out['step_ms']:.2f} ms[/], "
        f"[bold]{out['tokens_per_s_per_gpu']:,.0f}[/] {out['tokens_kind']}/s per GPU"
    )
    bd = out["breakdown_ms"]
    parts = ", ".join(f"{k} {bd[k]:.2f}" for k in (*KEYS, "overlap") if k in bd)
    console.print(f"  breakdown (ms, sums to the step): {parts}")
