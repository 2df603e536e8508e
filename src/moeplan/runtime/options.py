"""What one run executes besides the plan: model, tokens, checks, trace (:class:`RunOptions`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from moeplan.errors import require
from moeplan.planners.plan import Plan
from moeplan.runtime.config import MoEConfig

DEFAULT_SEQ = 8  # sequence length when neither the options nor the plan give one


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    """What to run: model (preset/config or an explicit ``config``), tokens, checks, trace."""

    model: str | None = None
    """Model preset name; default: the plan's ``model`` (or the runtime's default config)."""
    scale: str = "small"
    """``small`` (shrunk widths, same routing structure) or ``full`` (the preset's shapes)."""
    config: MoEConfig | None = None
    """An explicit runtime config (tests); overrides ``model``."""
    tokens: int = 64
    """Global batch in tokens (all data-parallel ranks together)."""
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

    def __post_init__(self) -> None:
        if self.seq is not None:
            require(self.seq >= 1, f"seq ({self.seq}) must be >= 1")
            require(self.tokens >= self.seq, f"tokens ({self.tokens}) must be >= seq ({self.seq})")


def resolve(plan: Plan, opts: RunOptions) -> RunOptions:
    """Fill ``seq`` from the plan's ``details.seq_len`` (FinDEP plans carry it), else 8."""
    if opts.seq is not None:
        return opts
    seq = plan.details.get("seq_len", DEFAULT_SEQ)
    require(isinstance(seq, int) and seq >= 1, f"plan.details.seq_len ({seq!r}) must be >= 1")
    return replace(opts, seq=seq)
