"""``moeplan bench`` and ``moeplan validate``: a benchmark simulated as ``vllm bench serve``
runs it (:mod:`moeplan.commands.bench`), compared with a measured result
(:mod:`moeplan.commands.bench_compare`), and every measured run of a CSV scored
(:mod:`moeplan.commands.validate`).

Thin: the deployment flags are serve-sim's own parameters (same names, help and checks), the
client flags are ``vllm bench serve``'s names.
"""

from __future__ import annotations

import inspect
import typing
from typing import Annotated, Any

import typer

from moeplan.cli._common import given_on_command_line, print_json, write_atomic
from moeplan.cli.serve import serve_sim
from moeplan.commands.bench import CLIENT, CLIENT_PARAMS, DEPLOYMENT_FLAGS, parse_rate

__all__ = ["register"]


def bench(ctx: typer.Context, **kw: Any) -> None:
    """Simulate a benchmark as `vllm bench serve` / `sglang.bench_serving` run it: every
    prompt sent (a burst at --request-rate inf, or Poisson/gamma), served to its last token,
    and the block the benchmark prints (duration, throughputs, TTFT, TPOT, ITL, E2EL)."""
    from moeplan.commands.bench import BenchSettings, bench_answer, text_block
    from moeplan.commands.bench_compare import compare_answer, compare_text, read_result

    given = given_on_command_line(ctx)
    client = {k: kw[k] for k in CLIENT}
    client["request_rate"] = parse_rate(kw["request_rate"])
    measured = None
    if kw["compare"] is not None:
        measured, client = read_result(kw["compare"], client, given)
    values = {k: kw[k] for k in DEPLOYMENT_FLAGS}
    if kw["search"] or kw["search_gpus"] is not None:
        _search(kw, values, client, given)
        return
    out = bench_answer(
        values, BenchSettings(**client), launch=kw["launch"], given=given,
        prompts=measured.prompts if measured is not None else None,
    )  # fmt: skip
    if measured is not None:
        out = compare_answer(out, measured)
    if kw["json_out"]:
        print_json(out)
    else:
        typer.echo(compare_text(out) if measured is not None else text_block(out))


def _search(kw: dict[str, Any], values: dict[str, Any], client: dict[str, Any], given: Any) -> None:
    """``bench --search``: every launch of the engine ranked (:mod:`moeplan.commands.bench_search`)."""
    from moeplan.commands.bench import BenchSettings
    from moeplan.commands.bench_search import search_answer, search_text
    from moeplan.errors import require

    require(kw["search"], "--search-gpus needs --search")
    require(kw["launch"] is None, "--launch is one launch; --search ranks every launch: drop one")
    require(
        kw["compare"] is None, "--compare checks one launch; --search ranks every launch: drop one"
    )
    out = search_answer(values, BenchSettings(**client), kw["search_gpus"], given)
    if kw["json_out"]:
        print_json(out)
    else:
        typer.echo(search_text(out))


def _signature() -> inspect.Signature:
    """bench's parameters: ctx, serve-sim's deployment flags (with --launch and --json), then
    the client flags (:data:`CLIENT_PARAMS`)."""
    hints = typing.get_type_hints(serve_sim, include_extras=True)
    serve = inspect.signature(serve_sim).parameters
    kind = inspect.Parameter.KEYWORD_ONLY
    params = [serve["ctx"].replace(annotation=typer.Context)]
    for name in (*DEPLOYMENT_FLAGS, "launch", "json_out"):
        params.append(serve[name].replace(annotation=hints[name], kind=kind))
    for name, (tp, default, text) in CLIENT_PARAMS.items():
        ann = Annotated[tp, typer.Option(help=text)]  # type: ignore[valid-type]
        params.append(inspect.Parameter(name, kind, default=default, annotation=ann))
    return inspect.Signature(params)


bench.__signature__ = _signature()  # type: ignore[attr-defined]
bench.__annotations__ = {p.name: p.annotation for p in bench.__signature__.parameters.values()}  # type: ignore[attr-defined]


def validate(
    file: Annotated[
        str | None,
        typer.Argument(help="CSV of measured runs (default: the shipped lab runs)."),
    ] = None,
    rows_out: Annotated[
        str | None, typer.Option("--rows-out", help="Write every row's figures here (CSV).")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N rows (a quick look).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    jobs: Annotated[
        int | None, typer.Option(help="Worker processes (default: the CPUs this process may use).")
    ] = None,
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Also answer each comparison group's question with moeplan's own pick (every "
            "TP/DP/EP/PP launch of the group's engines, checkpoints and GPU counts) and check it "
            "against the measured best (agrees, disagrees, tie, or unverified with both figures).",
        ),
    ] = False,
) -> None:
    """Run every measured benchmark of FILE through `moeplan bench` and score the
    predictions: error by GPU, engine and model, and rank agreement per report, on the frozen
    development and test halves."""
    from moeplan.commands.validate import rows_csv, validate_answer, validate_text

    out = validate_answer(file, limit=limit, jobs=jobs)
    text = validate_text(out)
    if plan:
        from moeplan.commands.lab_plan import plan_answer, plan_text

        out["plan"] = plan_answer(file, out, limit=limit, jobs=jobs)
        text = "\n".join([text, *plan_text(out["plan"])])
    if rows_out:
        write_atomic(rows_out, rows_csv(out))
    if json_out:
        print_json(out)
    else:
        typer.echo(text)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
    app.command("validate")(validate)
