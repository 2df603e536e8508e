"""``moeplan recommend``: the fewest GPUs and the deployment that serve a request rate under
the SLOs (logic: :mod:`moeplan.commands.recommend`)."""

from __future__ import annotations

from typing import Annotated

import typer

from moeplan.cli import _common as opt
from moeplan.cli._common import console, print_json


def recommend(
    model: Annotated[str, typer.Option(help="Model preset.")],
    cluster: Annotated[str, typer.Option(help="Cluster preset: the kind of node counted.")],
    rate: Annotated[float, typer.Option(help="Target Poisson arrival rate (requests/s).")],
    ttft_slo: opt.TtftSloOpt = 2000.0,
    tpot_slo: opt.TpotSloOpt = 100.0,
    slo_percentile: opt.SloPercentileOpt = 90.0,
    isl: opt.IslOpt = 2048,
    osl: opt.OslOpt = 256,
    engine: opt.EngineOpt = "sglang",
    requests: Annotated[int, typer.Option(help="Measured requests per steady run.")] = 500,
    json_out: opt.JsonOpt = False,
) -> None:
    """Fewest GPUs of CLUSTER's kind (GPUs of one node, then whole nodes) and the deployment
    serving RATE under the SLOs, with the search's proof that one size fewer cannot."""
    from moeplan.commands.recommend import COMMAND_INDENT, answer_lines, recommend

    out = recommend(model=model, cluster=cluster, rate=rate, ttft_slo_ms=ttft_slo,
                    tpot_slo_ms=tpot_slo, percentile=slo_percentile, isl=isl, osl=osl,
                    engine=engine, requests=requests)  # fmt: skip
    if json_out:
        print_json(out)
        return
    for line in answer_lines(out):
        console.print(line, highlight=False, soft_wrap=line.startswith(COMMAND_INDENT))


def register(app: typer.Typer) -> None:
    app.command("recommend")(recommend)
