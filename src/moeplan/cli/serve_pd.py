"""``moeplan serve-sim --pd``: simulate a given prefill/decode deployment under load.

``--pd "X*LAYOUT:Y*LAYOUT"`` (grammar: :mod:`moeplan.serve.pools.pd_spec`) or ``--pd plan.json`` of
a P/D plan (``details.disaggregation``). Thin: parse → :func:`moeplan.search.disagg.given.simulate_given`
→ the same payload and printout as one engine, the layout being the P/D pair.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from moeplan.cli._common import plural
from moeplan.cost import CostModel
from moeplan.errors import require
from moeplan.planners.plan import Plan
from moeplan.search.disagg.given import simulate_given
from moeplan.search.disagg.pools import Context, DisaggResult
from moeplan.serve.metrics import SLO
from moeplan.serve.pools.pd import PDLayout
from moeplan.serve.pools.pd_spec import parse_pd, pd_from_dict, pd_text
from moeplan.serve.workload.arrivals import ServeWorkload
from moeplan.specs import ClusterSpec, ModelSpec
from moeplan.specs.hf_config import read_json_file

PD_HELP = (
    "Simulate a P/D deployment: 'X*LAYOUT:Y*LAYOUT' (X prefill instances of one layout, Y "
    "decode instances of another) or a P/D plan.json. LAYOUT = dot-separated attn-tpN, "
    "attn-dpN, moe-tpN, moe-epN, moe-rN (redundant experts), ppN, mbN (micro-batches), "
    "dense-tpN, fused (MixServe AR-A2A); omitted degrees are 1; or agN.egN (an "
    "attention-FFN disaggregated decode instance). E.g. 3*attn-dp8.moe-ep8:1*ag2.eg6 "
    "or 2*attn-dp8.moe-ep8:1*attn-tp2.moe-tp2. Needs an open workload (--rate or the "
    "SLO-rate search); excludes --plan and the layout flags."
)


def read_pd(value: str) -> tuple[PDLayout, Plan | None]:
    """The deployment of ``--pd``: a plan.json path (an existing ``.json`` file) or the text."""
    if value.strip().endswith(".json") or Path(value).is_file():
        plan = Plan.from_dict(read_json_file(value, "plan"))
        pools = plan.details.get("disaggregation")
        require(
            pools is not None,
            f"--pd plan ({value}) has no details.disaggregation: it is a {plan.family} plan of "
            "one engine; simulate it with --plan",
        )
        return pd_from_dict(pools), plan
    return parse_pd(value), None


def check_pd_flags(
    layout_flags: dict[str, int | None],
    plan: str | None,
    concurrency: int | None,
    chunk_tokens: int | None,
    max_running: int | None,
    trace_out: str | None,
) -> None:
    """One-line errors for serve-sim flags that a P/D simulation does not take."""
    given = [k for k, v in layout_flags.items() if v is not None] + (["plan"] if plan else [])
    require(not given, f"--pd and --{given[0].replace('_', '-') if given else ''} are exclusive")
    for flag, v in (
        ("--concurrency", concurrency),
        ("--chunk-tokens", chunk_tokens),
        ("--max-running", max_running),
        ("--trace-out", trace_out),
    ):
        require(
            v is None,
            f"{flag} ({v}) does not apply to --pd (each pool's scheduler is its "
            "engine's default; the arrivals are an open stream)",
        )


def run_pd(
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
    mtp: tuple[int, float] = (0, 0.0),
) -> tuple[DisaggResult, dict[str, Any]]:
    """Simulate ``pd`` and return its result and the extra payload keys (the P/D text);
    ``mtp``: the decode pool's MTP draft tokens and acceptance (0: off)."""
    c = Context(model=model, cluster=cluster, cost=cm, workload=w, slo=slo, engine=engine,
                mtp=mtp[0], mtp_accept=mtp[1])  # fmt: skip
    r = simulate_given(c, pd, rate_given=rate is not None, requests=requests)
    at = rate if rate is not None else r.max_rate_meeting_slo_rps or None
    require(
        at is not None,
        f"no rate meets the SLOs on {pd.label} with both pools stable; raise "
        "--ttft-slo/--tpot-slo, give --rate, or change the deployment",
    )
    extra = {
        "pd": pd_text(pd),
        "pools": {"load_at_matched_rate": {"prefill": r.rho[0], "decode": r.rho[1]}},
        "rate_simulated_rps": at,
    }
    return r, extra


def pd_line(pd: PDLayout, r: DisaggResult) -> str:
    """The pools in words (the scheduler printed above is the decode pool's)."""
    return (
        f"Pools: {plural(pd.x, 'prefill instance')} of {pd.prefill.label}, "
        f"{plural(pd.y, 'decode instance')} "
        f"of {pd.decode.label} ({pd.gpus} GPUs; the scheduler above is the decode pool's); "
        f"analytic capacities {r.rho[0]:.2f} (prefill) and {r.rho[1]:.2f} (decode) of the "
        "pool that limits: 1.00 marks the bottleneck."
    )


def show_pd(
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
    json_out: bool,
    render: tuple[Callable[..., dict[str, Any]], Callable[..., None]],
    mtp: tuple[int, float] = (0, 0.0),
) -> None:
    """Simulate ``pd`` and print it as serve-sim prints one engine (plus the pools' line).

    ``render`` is serve-sim's (payload, human printer) pair, passed in so this module does
    not import :mod:`moeplan.cli.serve` (which imports it).
    """
    from moeplan.cli._common import console, print_json
    from moeplan.kernel_tables import pricing, pricing_line

    r, extra = run_pd(
        pd, model, cluster, cm, w, slo, engine=engine, rate=rate, requests=requests, mtp=mtp
    )
    _payload, _print_human = render
    out = _payload(model.name, cluster.name, r, w, slo, extra["rate_simulated_rps"], engine)
    out.update(extra, pricing=pricing(cm))
    if json_out:
        print_json(out)
        return
    _print_human(out, r)
    console.print(pd_line(pd, r))
    console.print(pricing_line(out["pricing"]))
