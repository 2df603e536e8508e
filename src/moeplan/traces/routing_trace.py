"""The in-memory routing trace (:class:`RoutingTrace`), its seeded split, and the conversion
between it and the long columnar layout of the files, with the column checks.

The format itself is described in :mod:`moeplan.traces.format` (DESIGN.md "Files and
formats"): on disk one row per (token occurrence, MoE layer); in memory the dense
``experts[N, L, k]`` (int16) per occurrence, because every occurrence carries all L MoE
layers. :func:`is_test_request` is the seeded, stateless train/test split by request, so it
can be applied chunk by chunk. :func:`check_columns` validates long columns read from a file
(integer dtype, one dimension — experts/weights two —, equal lengths and the ranges below)
*before* any narrowing cast (an expert id of 65541 is refused, never wrapped to 5
by int16). No file I/O here: reading is :mod:`moeplan.traces.trace_reader`, writing
:mod:`moeplan.traces.trace_writer`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeplan.errors import check_int, require
from moeplan.specs.model import MAX_LAYERS, MAX_VOCAB

COLUMNS = ("request_id", "position", "token_id", "layer", "experts")
MAX_TRACE_EXPERTS = 2**15  # expert ids are stored as int16 (-1 = none)
MAX_TOP_K = 256  # experts per token in one layer (SGLang pads to 8; no model routes > 64)
MAX_POSITION = 2**31 - 1  # positions are stored as int32
MAX_REQUEST_ID = 2**62
# column -> (lowest, highest) value accepted in a file
_RANGES = {
    "request_id": (0, MAX_REQUEST_ID),
    "position": (0, MAX_POSITION),
    "token_id": (0, MAX_VOCAB - 1),
    "layer": (0, MAX_LAYERS - 1),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutingTrace:
    """Dense routing trace: N token occurrences x L MoE layers x k routed experts.

    ``experts[n, l, j]`` is the j-th expert chosen for occurrence n at MoE layer l (highest
    gate weight first where known), -1 where a dynamic top-k chose fewer than k.
    ``weights`` (optional) has the same shape, float32.
    """

    request_id: np.ndarray  # [N] int64
    position: np.ndarray  # [N] int32
    token_id: np.ndarray  # [N] int64
    experts: np.ndarray  # [N, L, k] int16
    num_experts: int
    weights: np.ndarray | None = None  # [N, L, k] float32

    def __post_init__(self) -> None:
        for name in ("request_id", "position", "token_id"):
            _require_ints(f"trace.{name}", getattr(self, name), 1)
        _require_ints("trace.experts", self.experts, 3)
        check_int("trace.num_experts", self.num_experts, 1, MAX_TRACE_EXPERTS)
        n = len(self.token_id)
        require(
            len(self.request_id) == n and len(self.position) == n and self.experts.shape[0] == n,
            f"trace columns (lengths {len(self.request_id)}, {len(self.position)}, {n}, "
            f"{self.experts.shape[0]}) must have equal length",
        )
        require(self.num_experts >= 1, f"trace.num_experts ({self.num_experts}) must be >= 1")
        if n and self.experts.size:
            lo, hi = int(self.experts.min()), int(self.experts.max())
            require(
                lo >= -1 and hi < self.num_experts,
                f"trace.experts (range {lo}..{hi}) must lie in -1..{self.num_experts - 1}",
            )
        if self.weights is not None:
            require(
                self.weights.shape == self.experts.shape,
                f"trace.weights (shape {self.weights.shape}) must match experts "
                f"{self.experts.shape}",
            )

    @property
    def num_tokens(self) -> int:
        return len(self.token_id)

    @property
    def num_layers(self) -> int:
        return int(self.experts.shape[1])

    @property
    def top_k(self) -> int:
        return int(self.experts.shape[2])

    def take(self, mask_or_index: np.ndarray) -> RoutingTrace:
        """The occurrences selected by a boolean mask or an index array."""
        w = None if self.weights is None else self.weights[mask_or_index]
        return RoutingTrace(
            request_id=self.request_id[mask_or_index],
            position=self.position[mask_or_index],
            token_id=self.token_id[mask_or_index],
            experts=self.experts[mask_or_index],
            num_experts=self.num_experts,
            weights=w,
        )


def concat(parts: list[RoutingTrace]) -> RoutingTrace:
    """Concatenate chunks (same L, k, E) into one trace."""
    require(len(parts) > 0, "trace (0 chunks) must not be empty")
    has_w = all(p.weights is not None for p in parts)
    return RoutingTrace(
        request_id=np.concatenate([p.request_id for p in parts]),
        position=np.concatenate([p.position for p in parts]),
        token_id=np.concatenate([p.token_id for p in parts]),
        experts=np.concatenate([p.experts for p in parts]),
        num_experts=parts[0].num_experts,
        weights=np.concatenate([p.weights for p in parts]) if has_w else None,
    )  # type: ignore[misc]


def is_test_request(request_id: np.ndarray, seed: int, test_fraction: float) -> np.ndarray:
    """Seeded, stateless split by request: True where the request belongs to the test split.

    A splitmix64-style hash of (request_id, seed) mapped to [0, 1); the same request always
    lands on the same side, whichever chunk it arrives in.
    """
    require(0.0 < test_fraction < 1.0, f"test_fraction ({test_fraction}) must lie in (0, 1)")
    with np.errstate(over="ignore"):
        z = request_id.astype(np.uint64) + np.uint64(seed * 0x9E3779B97F4A7C15 % 2**64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(2**53) < test_fraction


def split(
    trace: RoutingTrace, seed: int = 0, test_fraction: float = 0.25
) -> tuple[RoutingTrace, RoutingTrace]:
    """(train, test) split by request, seeded."""
    test = is_test_request(trace.request_id, seed, test_fraction)
    return trace.take(~test), trace.take(test)


# ---------------------------------------------------------------- long <-> dense conversion
def to_long(trace: RoutingTrace) -> dict[str, np.ndarray]:
    """Long (file) layout: one row per (occurrence, layer)."""
    n, num_layers, k = trace.experts.shape
    cols = {
        "request_id": np.repeat(trace.request_id, num_layers),
        "position": np.repeat(trace.position, num_layers),
        "token_id": np.repeat(trace.token_id, num_layers),
        "layer": np.tile(np.arange(num_layers, dtype=np.int16), n),
        "experts": trace.experts.reshape(n * num_layers, k),
    }
    if trace.weights is not None:
        cols["weights"] = trace.weights.reshape(n * num_layers, k)
    return cols


def _require_ints(field: str, a: object, ndim: int) -> None:
    require(
        isinstance(a, np.ndarray) and a.dtype.kind in "iu" and a.ndim == ndim,
        f"{field} ({_describe(a)}) must be a {ndim}-d integer array",
    )


def _describe(a: object) -> str:
    if isinstance(a, np.ndarray):
        return f"dtype {a.dtype}, shape {a.shape}"
    return type(a).__name__


def _check_range(field: str, a: np.ndarray, lo: int, hi: int) -> None:
    """Range check on the file's own dtype (before any narrowing cast)."""
    if a.size:
        amin, amax = int(a.min()), int(a.max())
        require(lo <= amin and amax <= hi, f"{field} (range {amin}..{amax}) must lie in {lo}..{hi}")


def check_columns(cols: dict[str, np.ndarray], num_experts: int | None) -> dict[str, np.ndarray]:
    """Validated long columns (types, shapes, lengths, ranges); see the module docstring."""
    for c in COLUMNS:
        require(c in cols, f"trace column ({c}) is missing; need {', '.join(COLUMNS)}")
    out: dict[str, np.ndarray] = {}
    experts = np.asarray(cols["experts"])
    _require_ints("trace.experts", experts, 2)
    rows, k = experts.shape
    require(1 <= k <= MAX_TOP_K, f"trace.experts (k={k}) must have 1..{MAX_TOP_K} columns")
    hi = (num_experts if num_experts is not None else MAX_TRACE_EXPERTS) - 1
    _check_range("trace.experts", experts, -1, hi)
    for c, (lo, top) in _RANGES.items():
        a = np.asarray(cols[c])
        _require_ints(f"trace.{c}", a, 1)
        require(len(a) == rows, f"trace.{c} (length {len(a)}) must have one value per row ({rows})")
        _check_range(f"trace.{c}", a, lo, top)
        out[c] = a.astype(np.int64)
    out["experts"] = experts.astype(np.int16)
    w = cols.get("weights")
    if w is not None:
        w = np.asarray(w)
        require(
            w.dtype.kind in "fiu" and w.shape == experts.shape,
            f"trace.weights ({_describe(w)}) must be numbers shaped like experts {experts.shape}",
        )
        with np.errstate(over="ignore", invalid="ignore"):
            w32 = w.astype(np.float32)
        require(bool(np.isfinite(w32).all()), "trace.weights must be finite float32 values")
        out["weights"] = w32
    return out


def from_long(
    cols: dict[str, np.ndarray], num_experts: int | None, num_layers: int | None = None
) -> RoutingTrace:
    """Dense trace from long columns; rows must be grouped per occurrence, layers 0..L-1."""
    if num_experts is not None:
        check_int("trace num_experts", num_experts, 1, MAX_TRACE_EXPERTS)
    cols = check_columns(cols, num_experts)
    layer = cols["layer"]
    require(len(layer) > 0, "trace (0 rows) must not be empty")
    num_l = int(layer.max()) + 1 if num_layers is None else num_layers
    rows = len(layer)
    require(
        rows % num_l == 0 and bool((layer.reshape(-1, num_l) == np.arange(num_l)).all()),
        f"trace.layer (rows {rows}) must cycle 0..{num_l - 1} for every occurrence",
    )
    experts = cols["experts"]
    k = experts.shape[1]
    e_max = int(experts.max()) + 1 if num_experts is None else num_experts
    first = slice(0, rows, num_l)
    w = cols.get("weights")
    return RoutingTrace(
        request_id=cols["request_id"][first],
        position=cols["position"][first].astype(np.int32),
        token_id=cols["token_id"][first],
        experts=experts.reshape(-1, num_l, k),
        num_experts=max(e_max, 1),
        weights=None if w is None else w.reshape(-1, num_l, k),
    )
