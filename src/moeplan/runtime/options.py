"""What one run executes besides the plan: model, tokens, checks, trace (:class:`RunOptions`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from moeplan.errors import require
from moeplan.planners.plan import Plan
from moeplan.runtime.config import MoEConfig

DEFAULT_SEQ = 8  # sequence length when neither the options nor the plan give one
DEFAULT_TOKENS = 64  # global batch in tokens when not given (raised to one sequence if longer)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    """What to run: model (preset/config or an explicit ``config``), tokens, checks, trace."""

    model: str | None = None
    """Model preset name; default: the plan's ``model`` (or the runtime's default config)."""
    scale: str = "small"
    """``small`` (shrunk widths, same routing structure) or ``full`` (the preset's shapes)."""
    config: MoEConfig | None = None
    """An explicit runtime config (tests); overrides ``model``."""
    tokens: int | None = None
    """Global batch in tokens (all data-parallel ranks together); default
    :data:`DEFAULT_TOKENS`, or one sequence (``seq``) when that is longer."""
    seq: int | None = None
    """Sequence length; default: ``plan.details.seq_len`` (FinDEP plans), else 8."""
    seed: int = 0
    """Seed of the random weights (inputs use ``seed + 1``)."""
    check: bool = True
    """Also run the single-process reference on every rank and report the max abs error."""
    fused: bool | None = None
    """Hybrid TP-EP: MixServe's fused collectives; default ``plan.details.fused`` (true)."""
    async_send: bool | None = None
    """PP: non-blocking sends between stages; default ``plan.details.async_pp`` (true)."""
    micro_batches: int | None = None
    """PP micro-batches; default ``plan.details.microbatches``, else ``pp``."""
    timeout_s: float = 60.0
    """Collective timeout in seconds."""
    trace: str | None = None
    """Write the measured Chrome trace here (DEP: the simulator's beside it)."""
    warmup: int = 0
    """Untimed forward passes before the measured one."""
    weights: tuple[str, ...] = ()
    """safetensors files; default: seeded random weights."""

    @property
    def seq_len(self) -> int:
        """``seq`` once :func:`resolve` has filled it (internal invariant)."""
        assert self.seq is not None, "resolve() fills seq"
        return self.seq

    @property
    def batch_tokens(self) -> int:
        """``tokens`` once :func:`resolve` has filled it (internal invariant)."""
        assert self.tokens is not None, "resolve() fills tokens"
        return self.tokens

    def __post_init__(self) -> None:
        if self.seq is not None:
            require(self.seq >= 1, f"--isl ({self.seq}) must be >= 1")
            check_tokens(self.tokens, self.seq)


def check_tokens(tokens: int | None, seq: int) -> None:
    """A global batch of ``tokens`` holds at least one sequence of ``seq`` tokens (``None``:
    not given, :func:`resolve` picks it)."""
    require(
        tokens is None or tokens >= seq,
        f"--tokens ({tokens}) must be >= the sequence length ({seq}: --isl, else the plan's "
        "seq_len): the global batch holds whole sequences",
    )


def resolve(plan: Plan, opts: RunOptions) -> RunOptions:
    """Fill ``seq`` from the plan's ``details.seq_len`` (FinDEP plans carry it), else 8, and
    ``tokens`` (when not given) with :data:`DEFAULT_TOKENS` or one sequence if that is longer."""
    seq = opts.seq
    if seq is None:
        seq = plan.details.get("seq_len", DEFAULT_SEQ)
        require(isinstance(seq, int) and seq >= 1, f"plan.details.seq_len ({seq!r}) must be >= 1")
    check_tokens(opts.tokens, seq)
    tokens = max(DEFAULT_TOKENS, seq) if opts.tokens is None else opts.tokens
    return replace(opts, seq=seq, tokens=tokens)
