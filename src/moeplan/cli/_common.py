"""Shared CLI plumbing: JSON printing, units, atomic writes, rich console, shared options."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.segment import Segment
from rich.table import Table as _RichTable

from moeplan.backends import NO_ENGINE, backend_or_none, names
from moeplan.commands.json_text import json_text
from moeplan.commands.layout import output_width
from moeplan.io import OutputSet, write_atomic
from moeplan.textsafe import escape_controls

if TYPE_CHECKING:  # heavy imports (NumPy/SciPy) only where a command needs them
    from moeplan.cost import CostModel
    from moeplan.specs import ClusterSpec

__all__ = ["console", "err_console", "print_json", "write_atomic"]


class SafeConsole(Console):
    """A rich console that escapes control characters in what it prints (names, paths and
    config strings come from files: an ESC sequence in them must not reach the terminal);
    rich's own styling is applied after, so colours still work."""

    def render(self, renderable: Any, options: Any = None) -> Any:
        for seg in super().render(renderable, options):
            if seg.control or seg.text.isprintable() or not seg.text:
                yield seg
            else:
                yield Segment(escape_controls(seg.text, keep="\n"), seg.style, seg.control)


console = SafeConsole(highlight=False, width=output_width())


class Table(_RichTable):
    """A rich table whose cells wrap (a word longer than its column folds onto the next line)
    instead of being cut with an ellipsis: nothing printed is lost on a narrow terminal. The
    commands keep their tables within 80 columns (tests render them at that width)."""

    def add_column(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("overflow", "fold")
        super().add_column(*args, **kwargs)


err_console = SafeConsole(stderr=True, highlight=False)


def given_on_command_line(ctx: typer.Context) -> Callable[[str], bool]:
    """Whether the running command's parameter ``name`` was typed (not its default); the
    source is compared by name, as Typer carries its own copy of Click's enum."""

    def given(name: str) -> bool:
        source = ctx.get_parameter_source(name)
        return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT", "PROMPT")

    return given


def print_json(obj: Any) -> None:
    """Print one JSON object on stdout (:func:`moeplan.commands.json_text.json_text`)."""
    sys.stdout.write(json_text(obj) + "\n")


def fmt_bytes(n: float) -> str:
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_time(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} µs"


TIME_UNITS = (("s", 1.0, 3), ("ms", 1e-3, 2), ("µs", 1e-6, 1))  # (unit, seconds, decimals)


def fmt_times(values: list[float | None]) -> tuple[str, list[str]]:
    """One unit for a table column of times (seconds in): ``(unit, texts)``. The unit is the
    one :func:`fmt_time` would pick for the column's largest value, so a column never mixes
    "1.746 s" with "352.756 ms"; ``None`` or a non-finite value prints as "—"."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    top = max(finite, default=0.0)
    unit, scale, dec = next((u for u in TIME_UNITS if top >= u[1]), TIME_UNITS[-1])
    texts = ["—" if v is None or not math.isfinite(v) else f"{v / scale:,.{dec}f}" for v in values]
    return unit, texts


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 instance``, ``2 instances`` (``many``: an irregular plural)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def fmt_count(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


# ---- one vocabulary for workload and output flags (the same names and defaults everywhere)
DEFAULT_ISL = 2048
DEFAULT_OSL = 256
DEFAULT_BATCH = 32

IslOpt = Annotated[int, typer.Option("--isl", help="Prompt length per request (input tokens).")]
OslOpt = Annotated[int, typer.Option("--osl", help="Output length per request (tokens).")]
BatchOpt = Annotated[int, typer.Option("--batch", help="Concurrent requests served together.")]
OutDirOpt = Annotated[
    str | None,
    typer.Option(
        "--out",
        help="Folder for this command's files (plan.json and its figures); written as a "
        "unit, an existing folder of earlier moeplan output is replaced.",
    ),
]


def check_out(out: str | None, known: set[str]) -> None:
    """Refuse an ``--out`` folder that holds files this command does not write (before work)."""
    if out:
        OutputSet(out, known=known)


def write_outputs(
    out: str | None, known: set[str], files: Mapping[str, str | bytes | Callable[[], str | bytes]]
) -> dict[str, str]:
    """Write ``{name: data or a function making it}`` into folder ``out`` as one set.

    ``known`` is every name the command can write (an earlier run's files among them are
    replaced). Every producer runs before anything is published (:class:`moeplan.io.OutputSet`),
    so a failure leaves an earlier set untouched. Returns ``{name: final path}``.
    """
    if not out:
        return {}
    data = {name: (make() if callable(make) else make) for name, make in files.items()}
    written = {}
    with OutputSet(out, known=known | set(data)) as outputs:
        for name, blob in data.items():
            written[name] = str(outputs.write(name, blob, executable=name.endswith(".sh")))
    return written


JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
NodesOpt = Annotated[int | None, typer.Option(help="Override the cluster's node count.")]
RacksOpt = Annotated[
    int | None,
    typer.Option(help="Racks of a rack cluster (gb200-nvl72, gb300-nvl72: 72 GPUs per rack)."),
]

# ---- the serving footing's flags (``plan`` and ``serve-sim``)
TtftSloOpt = Annotated[float, typer.Option(help="TTFT SLO in ms (at --slo-percentile).")]
TpotSloOpt = Annotated[float, typer.Option(help="TPOT SLO in ms (at --slo-percentile).")]
SloPercentileOpt = Annotated[float, typer.Option(help="Percentile the SLOs bind: 50, 90 or 99.")]
ProfileOpt = Annotated[str | None, typer.Option(help="HardwareProfile (default: the cluster's).")]
CostEngineOpt = Annotated[
    str,
    typer.Option(
        help="'engine' (price kernels from the engine's measured tables) or 'none' "
        "(the calibrated GEMM/NCCL model alone)."
    ),
]
MtpOpt = Annotated[
    int, typer.Option(help="MTP draft tokens per decode step (0: off; needs --mtp-accept).")
]
MtpAcceptOpt = Annotated[
    float | None, typer.Option(help="Acceptance rate of each MTP draft token, in (0, 1].")
]
KvDtypeOpt = Annotated[
    str,
    typer.Option(
        help="KV cache dtype: auto (the engine's default for the checkpoint and GPU), bf16 or fp8."
    ),
]
RoutingOpt = Annotated[str, typer.Option(help="random: each batch draws its tokens' experts, the busiest EP rank above the mean (default); balanced: every rank its exact share in every batch (DeepSeek's profile).")]  # fmt: skip
MemFractionOpt = Annotated[float | None, typer.Option(help="Engine memory fraction in (0, 1): SGLang --mem-fraction-static, vLLM --gpu-memory-utilization, TRT-LLM free_gpu_memory_fraction (default: searched from the engine's own default up to 0.95).")]  # fmt: skip

QuietOpt = Annotated[
    bool, typer.Option("--quiet", help="No progress display (it is on stderr, off with --json).")
]


@contextlib.contextmanager
def progress(show: bool, description: str) -> Iterator[Callable[[str], None]]:
    """A spinner with the elapsed time on stderr while a long command works; yields a function
    that replaces its description (the step under way). ``show`` False (``--quiet``,
    ``--json``) or stderr not a terminal: nothing is drawn and the function does nothing.
    Transient: the line is gone when the command prints its answer."""
    if not (show and err_console.is_terminal):  # nothing to animate in a log file
        yield lambda text: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as prog:
        task = prog.add_task(description, total=None)
        yield lambda text: prog.update(task, description=text)


# ---- the engine whose measured kernels price a plan (as on ``moeplan plan``)
#: ``--engine`` of the cost commands: every engine's kernel tables, or none
COST_ENGINES = (*names(), NO_ENGINE)
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Engine modelled: sglang, vllm or trtllm — its measured kernels "
        "(moeplan.cost.kerneldb) price fused MoE, attention/MLA and intra-node all-reduce/"
        "all-to-all; a GPU without tables gets them transferred by its datasheet. 'none': the "
        "calibrated GEMM/NCCL model alone.",
    ),
]


EngineVersionOpt = Annotated[
    str | None,
    typer.Option(
        help="Engine release whose kernel tables price it (e.g. 0.5.9; default: the newest "
        "table of each kernel): another release's table where none was measured, with its "
        "measured transfer error (docs/benchmarks/version_transfer.md).",
    ),
]


def engine_cost(
    cluster: ClusterSpec, profile: str | None, engine: str, version: str | None = None
) -> CostModel:
    """The cost model of ``--engine`` at ``--engine-version`` (one line, exit 2, for an
    unknown engine or a version it cannot price)."""
    from moeplan.errors import require
    from moeplan.kernel_tables import engine_cost_model

    require(
        engine in COST_ENGINES, f"--engine ({engine!r}) must be one of {', '.join(COST_ENGINES)}"
    )
    b = backend_or_none(engine)
    require(b is not None or version is None, "--engine-version needs an --engine with tables")
    return engine_cost_model(cluster, profile, None if b is None else b.kernel_table, version)


def print_pricing(price: dict[str, Any], sources: dict | None = None, what: str = "") -> None:
    """The engine and source-mix line of the human output (``price``: :func:`moeplan.kernel_tables.pricing`),
    then the shares of ``what``'s priced seconds (``sources``: ``price_sources``) when given."""
    from moeplan.kernel_tables import pricing_line
    from moeplan.search.job.outcome import sources_line

    console.print(pricing_line(price))
    if sources is not None:
        console.print(sources_line(sources, what))
