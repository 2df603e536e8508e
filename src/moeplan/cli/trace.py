"""``moeplan trace synth|import|stats``: make, import and describe routing traces.

Thin: parse flags, call :mod:`moeplan.traces`, print a rich table or one JSON object.
Files are written atomically by the trace writers (temp file removed on failure and on
SIGTERM, which the CLI turns into an exception). Flags are checked before any work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from moeplan.cli._common import QuietOpt, Table, console, print_json, progress
from moeplan.commands.trace import check_trace_path, load_info, synth_config, trace_info
from moeplan.errors import check_int, require
from moeplan.specs import load_model
from moeplan.traces.format import MAX_TRACE_EXPERTS, TraceWriter, iter_trace, load_trace, save_trace
from moeplan.traces.stats import trace_stats
from moeplan.traces.synthetic import iter_synthesize

MAX_REQUESTS = 2**24  # synthetic requests (about 4.5e9 occurrences at the default lengths)
MAX_SEED = 2**63 - 1


trace_app = typer.Typer(
    help="Routing traces: synthesize, import real dumps, statistics.", no_args_is_help=True
)


@trace_app.command("synth")
def synth(
    out: Annotated[Path, typer.Option("--out", help="Output .parquet (streamed) or .npz")],
    model: Annotated[
        str, typer.Option(help="Model preset, config.json or checkpoint folder.")
    ] = "deepseek-v2-lite",
    requests: Annotated[int, typer.Option(help="Number of requests")] = 1024,
    seed: Annotated[int, typer.Option(help="Random seed")] = 0,
    layers: Annotated[
        int | None,
        typer.Option(
            help="Keep only the first L decoder layers (as `plan --layers`): the trace then has "
            "that truncated model's MoE layers"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Synthetic trace with Zipf tokens, topics, token-expert affinity, Markov layers."""
    check_int("--requests", requests, 1, MAX_REQUESTS)
    check_int("--seed", seed, 0, MAX_SEED)
    check_trace_path(out)
    m = load_model(model)
    require(m.num_experts > 1, f"--model ({model}) must be an MoE model")
    if layers is not None:
        require(layers >= 1, f"--layers ({layers}) must be >= 1")
        m = m.with_layers(min(layers, m.num_layers))
    cfg = synth_config(m, requests, seed)
    n = 0
    with progress(not (quiet or as_json), f"synthesizing {requests} requests") as step:
        if out.suffix == ".parquet":
            with TraceWriter(out) as w:
                for chunk in iter_synthesize(cfg):
                    w.write(chunk)
                    n += chunk.num_tokens
                    step(f"synthesizing: {n:,} token occurrences written")
        else:
            from moeplan.traces.format import concat

            tr = concat(list(iter_synthesize(cfg)))
            save_trace(tr, out)
            n = tr.num_tokens
    info = {
        "out": str(out),
        "occurrences": n,
        "requests": requests,
        "layers": cfg.num_layers,
        "experts": cfg.num_experts,
        "top_k": cfg.top_k,
        "seed": seed,
    }
    if as_json:
        print_json(info)
    else:
        console.print(
            f"wrote {n} token occurrences x {cfg.num_layers} MoE layers "
            f"({requests} requests, E={cfg.num_experts}, k={cfg.top_k}) to {out}"
        )


@trace_app.command("import")
def import_(
    src: Annotated[list[Path], typer.Argument(help="SGLang dump file(s) (.pt)")],
    out: Annotated[
        Path, typer.Option("--out", help="Output .parquet/.npz (per_token) or .json (stat)")
    ],
    kind: Annotated[
        str, typer.Option("--from", help="sglang-per-token | sglang-stat")
    ] = "sglang-per-token",
    num_experts: Annotated[int | None, typer.Option(help="Routed experts per layer")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout")] = False,
) -> None:
    """Import SGLang expert-distribution dumps (``torch.load(weights_only=True)`` only)."""
    from moeplan.traces import sglang

    require(
        kind in ("sglang-per-token", "sglang-stat"),
        f"--from ({kind}) must be sglang-per-token or sglang-stat",
    )
    if num_experts is not None:
        check_int("--num-experts", num_experts, 1, MAX_TRACE_EXPERTS)
    if kind == "sglang-stat":
        require(out.suffix == ".json", f"--out ({out}) must end in .json for --from sglang-stat")
        require(not out.is_dir(), f"--out ({out}) is a directory; give a file name")
    else:
        check_trace_path(out)
    if kind == "sglang-stat":
        load = sglang.read_stat(src, num_experts=num_experts)
        sglang.write_load_json(out, load)
        info = {"out": str(out), **load_info(load)}
    else:
        tr = sglang.read_per_token(src, num_experts=num_experts)
        save_trace(tr, out)
        info = {"out": str(out), **trace_info(tr)}
    if as_json:
        print_json(info)
    else:
        console.print(" ".join(f"{k}={v}" for k, v in info.items()))


@trace_app.command("stats")
def stats(
    path: Annotated[Path, typer.Argument(help="Trace file (.parquet or .npz)")],
    ep: Annotated[int, typer.Option(help="EP degree for the next-layer device statistic")] = 8,
    seed: Annotated[int, typer.Option(help="Split seed")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout")] = False,
) -> None:
    """Sizes and the statistics Sem-MoE reports (kurtosis, static predictor, look-back)."""
    check_int("--ep", ep, 1, MAX_TRACE_EXPERTS)
    check_int("--seed", seed, 0, MAX_SEED)
    s = trace_stats(load_trace(path), ep=ep, seed=seed)
    if as_json:
        print_json(s)
        return
    table = Table(title=f"trace {path}")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for k, v in s.items():
        if isinstance(v, dict):
            v = ", ".join(f"n={a}: {b:.3f}" for a, b in v.items())
        elif isinstance(v, float):
            v = f"{v:.4f}"
        elif v is None:
            v = "n/a (no token seen 20 times in the train split)"
        table.add_row(k, str(v))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")


__all__ = ["register", "iter_trace"]
