"""``moeplan serve-sim`` on one instance layout (``replicas`` round-robin copies): its
SLO-bound capacity in steady state (:func:`moeplan.search.capacity.sim.layout_capacity`, the
figure ``moeplan plan`` ranks by) and the steady run at capacity or at ``--rate``, or one
closed-loop run (``--concurrency``); then the payload, the Chrome trace and the printout.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from moeplan.cli._common import console, err_console, print_json, progress, write_atomic
from moeplan.cli._steady import require_boundable
from moeplan.cli.serve_checks import Deployment
from moeplan.cli.serve_print import payload, print_human
from moeplan.cost import CostModel
from moeplan.errors import MoeplanError, require
from moeplan.search.capacity.sim import layout_capacity
from moeplan.search.capacity.slo import steady_probe
from moeplan.search.colocated.evaluate import ServeResult, evaluate_layout, run_workload
from moeplan.search.colocated.rank import replicated, require_steady, serve_result
from moeplan.serve import SLO, IterationModel, ServeWorkload, serve_trace
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.specs import ClusterSpec, ModelSpec, RoutingProfile


def run_single(
    m: ModelSpec,
    c: ClusterSpec,
    cm: CostModel,
    d: Deployment,
    w: ServeWorkload,
    slo: SLO,
    knobs: InstanceKnobs,
    *,
    engine: str,
    rate: float | None,
    routing: RoutingProfile | None,
    trace_out: str | None,
    json_out: bool,
    quiet: bool,
) -> None:
    """Simulate ``d``'s instance under ``w`` and print the result (JSON with ``json_out``)."""
    lay = d.layout
    closed = w.concurrency is not None
    work = f"simulating {lay.label}" + ("" if rate or closed else ": SLO capacity search")
    with progress(not (quiet or json_out), work):
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
    out.update(_provenance(m, cm, lay, knobs))
    if trace_out:
        meta = {"model": m.name, "cluster": c.name}
        write_atomic(trace_out, json.dumps(serve_trace(sim, label=lay.label, metadata=meta)))
        out["trace"] = trace_out
    if json_out:
        print_json(out)
    else:
        _show(out, r, knobs)


def _closed_loop(
    m: ModelSpec,
    c: ClusterSpec,
    cm: CostModel,
    d: Deployment,
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
    d: Deployment,
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
    )


def _provenance(m: ModelSpec, cm: CostModel, lay: Any, knobs: InstanceKnobs) -> dict[str, Any]:
    """The knobs, the quantization warning and the kernel prices' sources of the payload."""
    from moeplan.cost.mixer_prices import stand_in_fields
    from moeplan.cost.provenance import quant_vs_bf16
    from moeplan.kernel_tables import pricing
    from moeplan.search.job.outcome import quant_sentence

    qw = quant_sentence(quant_vs_bf16(cm, m, ep=lay.moe_ep, tp=lay.moe_tp))
    return {
        "knobs": knobs.to_dict(),
        "warnings": [qw] if qw else [],
        "pricing": {**pricing(cm), **stand_in_fields(m, cm.engine is not None)},  # stand-in layers
    }


def _show(out: dict[str, Any], r: ServeResult, knobs: InstanceKnobs) -> None:
    from moeplan.kernel_tables import pricing_line

    print_human(out, r)
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
