"""Where a predicted kernel time comes from, and how far to trust it.

Every prediction of the kernel database is a :class:`Prediction`: seconds, a source and the
held-out error of that source for that (GPU, engine, operation):

- ``measured``: the exact row exists in NVIDIA's table (error 0: the table *is* the answer).
- ``interpolated``: inside the measured shapes of this GPU and engine: the analytic model
  corrected by the residuals of the nearest measured rows (along the token axis of the same
  shape, or across neighbouring shapes). Its error is the held-out *whole-shape* error.
- ``transferred``: the analytic model whose efficiencies were learned on a table GPU, scaled by
  this GPU's datasheet (or this GPU's model outside its measured range). Its error is the
  leave-one-GPU-out error (learn on A100, predict H100, and the reverse).
- ``roofline``: no table for the engine and operation on any GPU: datasheet peaks at fixed
  efficiencies; or a price of any other source raised to the datasheet floor (the peak priced
  it). Its error is that roofline's error against the tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from moeplan.errors import require

Source = Literal["measured", "interpolated", "transferred", "roofline"]
SOURCES: tuple[Source, ...] = ("measured", "interpolated", "transferred", "roofline")


@dataclass(frozen=True, kw_only=True, slots=True)
class Prediction:
    """One predicted kernel time (seconds) with its source and that source's held-out error.

    ``error`` / ``error_p90`` are the median / 90th-percentile absolute relative error of the
    source (fractions; ``None`` when never evaluated), ``detail`` says which table and kernel.
    """

    seconds: float
    source: Source
    error: float | None = None
    error_p90: float | None = None
    detail: str = field(default="")

    def __post_init__(self) -> None:
        require(
            self.source in SOURCES,
            f"prediction.source ({self.source!r}) must be one of {', '.join(SOURCES)}",
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "seconds": self.seconds,
            "source": self.source,
            "error": self.error,
            "error_p90": self.error_p90,
            "detail": self.detail,
        }
