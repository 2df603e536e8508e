"""``moeplan plan``'s inputs and answer: the workload, the serving footing's request stream,
the instance knobs it searches, the routing trace checked up front, and the ``--json`` object
of a :class:`moeplan.search.outcome.PlanOutcome`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from moeplan.errors import MoeplanError, require
from moeplan.search.outcome import PlanOutcome
from moeplan.serve import LengthDist, ServeWorkload
from moeplan.specs import Workload

#: the --requests range this command accepts: its own choice, not a statistical rule (the SLO
#: percentile's minimum, p90 35 / p99 381 measured requests, is checked on top of it by
#: ``check_requests`` with the capacity search's ``percentile_boundable``)
MIN_REQUESTS, MAX_REQUESTS = 50, 100_000


ANALYTIC_NOTE = (
    "each family's own figure from its paper's model: prompt tokens/s per GPU for "
    "the prefill of one batch of --batch prompts (MixServe, SMIDT, FinDEP); shown "
    "beside the serving simulation, not used to rank"
)


def serve_workload(
    w: Workload,
    requests: int,
    rate: float | None,
    concurrency: int | None,
    isl_dist: str | None,
    osl_dist: str | None,
    seed: int,
) -> ServeWorkload:
    """The request stream of the serving footing (a placeholder rate when none is given:
    each plan is then simulated at its own largest SLO-meeting rate)."""
    isl = LengthDist.parse(isl_dist) if isl_dist else LengthDist(mean=w.isl)
    osl = LengthDist.parse(osl_dist) if osl_dist else LengthDist(mean=w.osl)
    given = rate if rate is not None else w.rate
    return ServeWorkload(
        num_requests=requests,
        rate=None if concurrency else (given or 1.0),
        concurrency=concurrency,
        isl=isl,
        osl=osl,
        seed=seed,
    )


def read_workload(path: str | None, isl: int, osl: int, batch: int, rate: float | None) -> Workload:
    if path is None:
        return Workload(phase="both", batch=batch, isl=isl, osl=osl, rate=rate)
    from moeplan.specs.hf_config import read_json_file

    data = read_json_file(path, "workload")  # bounded: regular file, UTF-8, sane sizes
    require(isinstance(data, dict), f"workload ({path}) must be a JSON object")
    allowed = {"phase", "batch", "isl", "osl", "rate"}
    extra = sorted(set(data) - allowed)
    require(
        not extra,
        f"workload.{extra[0] if extra else ''} is not a workload field "
        f"(allowed: {', '.join(sorted(allowed))})",
    )
    try:
        return Workload(**data)
    except TypeError as err:
        raise MoeplanError(f"workload ({path}) is malformed: {err}") from None


def check_trace(trace: str, num_experts: int) -> None:
    """Stream ``trace`` once through the reader's checks (format, ranges, expert ids)."""
    from moeplan.traces.format import iter_trace

    require(Path(trace).exists(), f"--trace ({trace}) does not exist")
    for _ in iter_trace(trace, num_experts=num_experts):
        pass


def trace_source(trace: str | None, num_experts: int) -> Any:
    """The routing trace's chunks, read afresh on each call (None: no trace)."""
    if trace is None:
        return None
    from moeplan.traces.format import iter_trace

    return lambda: iter_trace(trace, num_experts=num_experts)


def knob_search(
    redundant: int | None,
    tbo: bool | None,
    mtp: int,
    mtp_accept: float | None,
    kv_dtype: str,
    a2a: str | None,
) -> Any:
    """The instance knobs ``plan`` searches: the given ones fixed (one-line errors)."""
    from moeplan.cost.a2a import A2A_CHOICES
    from moeplan.search.rank import KnobSearch
    from moeplan.serve.instance_knobs import KV_DTYPES, InstanceKnobs

    require(redundant is None or redundant >= 0, f"--redundant-experts ({redundant}) must be >= 0")
    require(
        kv_dtype in KV_DTYPES, f"--kv-dtype ({kv_dtype!r}) must be one of {', '.join(KV_DTYPES)}"
    )
    require(
        a2a is None or a2a in A2A_CHOICES,
        f"--a2a ({a2a!r}) must be one of {', '.join(A2A_CHOICES)}",
    )
    require(mtp_accept is None or mtp > 0, f"--mtp-accept ({mtp_accept}) needs --mtp N")
    require(
        mtp_accept is None or 0 < mtp_accept <= 1, f"--mtp-accept ({mtp_accept}) must be in (0, 1]"
    )
    require(
        mtp == 0 or mtp_accept is not None,
        f"--mtp ({mtp}) needs --mtp-accept P in (0, 1] (no default acceptance)",
    )
    given = {
        n
        for n, v in (
            ("tbo", tbo),
            ("redundant_experts", redundant),
            ("a2a", a2a),
            ("mtp", mtp or None),
        )
        if v is not None
    }
    base = InstanceKnobs(
        tbo=bool(tbo), kv_dtype=kv_dtype, mtp=mtp, mtp_accept=float(mtp_accept or 0.0)
    )
    return KnobSearch(base=base, given=frozenset(given), redundant=redundant, a2a=a2a)


def plan_warnings(layers: int, full_layers: int, outcome: PlanOutcome) -> list[str]:
    """The warnings of a plan: a truncated model (``--layers``), a quantized one priced on
    bf16 tables."""
    from moeplan.export.plan_export import truncation_warning
    from moeplan.search.outcome import quant_sentence

    truncated = truncation_warning(layers, full_layers)
    return [x for x in (truncated, quant_sentence(outcome.quant)) if x]


def plan_json(
    outcome: PlanOutcome, files: dict[str, str], elapsed: float, warnings: list[str]
) -> dict:
    """The ``--json`` object of a plan (``files``: the artifacts written, ``elapsed``: the
    command's seconds)."""
    result, ranking, place_res = outcome.analytic, outcome.ranking, outcome.placement
    win = ranking.winner
    out: dict[str, Any] = {
        "model": result.model.name,
        "cluster": result.cluster.name,
        "objective": ranking.objective,
        "slo": {
            "ttft_s": ranking.slo.ttft_s,
            "tpot_s": ranking.slo.tpot_s,
            "percentile": ranking.slo.percentile,
        },
        "workload": outcome.served_workload,
        "candidates": [s.summary() for s in ranking.ranked],
        "pareto": ranking.pareto(),
        "not_served": ranking.not_served,
        "pruned": [
            {
                "family": e.family,
                "label": e.label,
                "layout": e.layout.label,
                "bound_output_tokens_per_s_per_gpu": v,
            }
            for e, v in ranking.pruned
        ],
        "winner": win.summary(),
        "analytic": {
            "note": ANALYTIC_NOTE,
            "ranking": [c.summary() for c in result.candidates],
            "explanation": result.explanation,
        },
        "skipped": result.skipped,
        "explanation": list(outcome.explanation),
        "limits": outcome.limits,
        "cluster_fill": None if outcome.fill is None else outcome.fill.to_dict(),
        "plan": outcome.plan.to_dict(),
        "artifacts": files,
        "elapsed_s": elapsed,
        "timings_s": outcome.timings,
        "search": ranking.search,
    }
    if place_res is not None:
        out["placement"] = place_res.to_dict()
    return {
        **out,
        **({"placement_skipped": outcome.placement_note} if outcome.placement_note else {}),
        "pricing": outcome.pricing,
        "warnings": warnings,
    }
