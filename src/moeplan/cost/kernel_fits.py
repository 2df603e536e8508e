"""Per-operation kernel models fitted to one machine's own measurements (``moeplan calibrate``).

A user whose GPU has no measured tables runs ``moeplan calibrate --device cuda``: it times
moeplan's own kernels at the shapes of NVIDIA's tables (:mod:`moeplan.profiling.tables`) and
fits the three models below, which the cost model then uses for the fused-MoE call and the
attention core (:class:`moeplan.cost.CostModel` without a kernel database). Each model has
the few physical terms the H100 measurements showed to matter:

- :class:`MoeFit` (one routed-expert call on one GPU, ``T`` tokens routed to ``E`` experts of
  which ``E_l`` are local, top-``k``, width ``h``, expert width ``i``):
  ``floor + per_token·T + max(6·h·i·rows/F, hit·3·h·i·w/B) + act/B`` where ``pairs = T·k·E_l/E``,
  ``hit = E_l·(1 − (1 − k/E)^T)`` local experts receiving a token (only their weights are read:
  the 1-token rows are weight-bandwidth bound), ``rows`` = pairs rounded up to ``tile`` per hit
  expert (grouped-GEMM tiles), ``act`` = gather and combine traffic ``4·pairs·h·a + 2·T·h·a``.
- :class:`AttentionFit` prefill: ``floor + per_seq·b + flops/F`` (causal FLOPs
  ``4·b·hq·d·s·(s+1)/2``, query length padded to ``tile``); decode:
  ``floor + per_seq·b + max(flops/F, kv_bytes/B)`` (one query over ``ctx`` keys is a read of the
  KV cache).

Fits minimise squared log error (relative error) with every parameter positive
(``scipy.optimize.least_squares`` over log-parameters), started from datasheet-like guesses.
:func:`heldout_folds` holds out *whole shapes* (every token count of a shape together), as the
kernel-database evaluation does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from moeplan.cost.linear import FitQuality, quality

TILE = 64  # rows per grouped-GEMM / attention query tile (CUTLASS / FlashAttention blocks)


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeShape:
    """One routed-expert call on one GPU (``inter`` already divided by the MoE TP degree)."""

    tokens: float
    hidden: int
    inter: float
    top_k: float
    experts: int
    local_experts: float
    weight_bytes: float = 2.0
    act_bytes: float = 2.0

    def terms(self, tile: int = TILE) -> tuple[float, float, float]:
        """``(grouped-GEMM FLOPs, weight bytes read, activation bytes moved)``."""
        t, k, e, el = self.tokens, self.top_k, self.experts, self.local_experts
        pairs = t * k * el / e
        hit = el * (1.0 - (1.0 - min(k / e, 1.0)) ** t) if t > 0 else 0.0
        rows = hit * math.ceil(pairs / hit / tile) * tile if hit > 0 else 0.0
        h, i = self.hidden, self.inter
        flops = 6.0 * rows * h * i
        weights = hit * 3.0 * h * i * self.weight_bytes
        act = (4.0 * pairs + 2.0 * t) * h * self.act_bytes
        return flops, weights, act


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeFit:
    floor: float
    per_token: float
    flops: float
    bw: float
    tile: int = TILE

    def __call__(self, s: MoeShape) -> float:
        f, w, a = s.terms(self.tile)
        return (
            self.floor + self.per_token * s.tokens + max(f / self.flops, w / self.bw) + a / self.bw
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class AttnShape:
    """Attention core: ``seqs`` sequences of ``q_len`` queries over ``ctx`` keys (causal when
    ``q_len > 1``), ``heads`` query heads, ``kv_heads``, ``qk_dim`` + ``v_dim`` per head."""

    seqs: float
    q_len: float
    ctx: float
    heads: float
    kv_heads: float
    qk_dim: float
    v_dim: float
    kv_bytes_per_token: float | None = None  # default: kv_heads·(qk_dim + v_dim)·2

    def flops(self, tile: int = TILE) -> float:
        q = math.ceil(self.q_len / tile) * tile if self.q_len > 1 else 1.0
        keys = self.ctx - (self.q_len - 1) / 2.0 if self.q_len > 1 else self.ctx
        return 2.0 * self.seqs * q * keys * self.heads * (self.qk_dim + self.v_dim)

    def kv_bytes(self) -> float:
        per = self.kv_bytes_per_token
        if per is None:
            per = self.kv_heads * (self.qk_dim + self.v_dim) * 2.0
        return self.seqs * self.ctx * per


@dataclass(frozen=True, kw_only=True, slots=True)
class AttentionFit:
    floor: float
    per_seq: float
    flops: float
    bw: float = math.inf  # decode only: KV-cache read bandwidth
    tile: int = TILE

    def __call__(self, s: AttnShape) -> float:
        work = s.flops(self.tile) / self.flops
        if s.q_len <= 1:
            work = max(work, s.kv_bytes() / self.bw)
        return self.floor + self.per_seq * s.seqs + work


@dataclass(frozen=True, kw_only=True)
class KernelFits:
    """The fitted models and each one's held-out quality (whole shapes held out)."""

    moe: MoeFit | None = None
    prefill: AttentionFit | None = None
    decode: AttentionFit | None = None
    quality: dict[str, FitQuality] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: asdict(v)
            for k in ("moe", "prefill", "decode")
            if (v := getattr(self, k)) is not None
        }
        out["quality"] = {k: q.to_dict() for k, q in self.quality.items()}
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelFits:
        def attn(key: str) -> AttentionFit | None:
            return AttentionFit(**d[key]) if d.get(key) else None

        return cls(
            moe=MoeFit(**d["moe"]) if d.get("moe") else None,
            prefill=attn("prefill"),
            decode=attn("decode"),
            quality={k: FitQuality(**q) for k, q in d.get("quality", {}).items()},
        )


def _fit_log(
    fn: Callable[[np.ndarray], np.ndarray], y: np.ndarray, guess: Sequence[float]
) -> np.ndarray:
    from scipy.optimize import least_squares

    ly = np.log(y)
    res = least_squares(
        lambda p: np.log(np.maximum(fn(np.exp(p)), 1e-30)) - ly,
        np.log(np.asarray(guess, float)),
        method="trf",
        loss="soft_l1",
        f_scale=0.1,
        max_nfev=4000,
    )
    return np.exp(res.x)


def fit_moe(shapes: Sequence[MoeShape], seconds: Sequence[float]) -> MoeFit:
    terms = np.array([s.terms() for s in shapes])
    tok = np.array([s.tokens for s in shapes])
    y = np.asarray(seconds, float)

    def model(p: np.ndarray) -> np.ndarray:
        return (
            p[0]
            + p[1] * tok
            + np.maximum(terms[:, 0] / p[2], terms[:, 1] / p[3])
            + terms[:, 2] / p[3]
        )

    p = _fit_log(model, y, (max(float(y.min()) / 2, 1e-6), 1e-9, 5e14, 2e12))
    return MoeFit(floor=float(p[0]), per_token=float(p[1]), flops=float(p[2]), bw=float(p[3]))


def fit_attention(
    shapes: Sequence[AttnShape], seconds: Sequence[float], decode: bool
) -> AttentionFit:
    fl = np.array([s.flops() for s in shapes])
    kv = np.array([s.kv_bytes() for s in shapes])
    seqs = np.array([s.seqs for s in shapes])
    y = np.asarray(seconds, float)
    floor0 = max(float(y.min()) / 2, 1e-6)
    if decode:
        p = _fit_log(
            lambda p: p[0] + p[1] * seqs + np.maximum(fl / p[2], kv / p[3]),
            y,
            (floor0, 1e-7, 3e14, 2e12),
        )
        return AttentionFit(
            floor=float(p[0]), per_seq=float(p[1]), flops=float(p[2]), bw=float(p[3])
        )
    p = _fit_log(lambda p: p[0] + p[1] * seqs + fl / p[2], y, (floor0, 1e-7, 3e14))
    return AttentionFit(floor=float(p[0]), per_seq=float(p[1]), flops=float(p[2]))


def heldout_folds(groups: Sequence[Any], folds: int = 5, seed: int = 0) -> list[np.ndarray]:
    """Boolean test masks holding out whole groups (shapes), ``folds`` of them, seeded."""
    keys = sorted({repr(g) for g in groups})
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(keys))
    fold_of = {keys[j]: i % folds for i, j in enumerate(order)}
    lab = np.array([fold_of[repr(g)] for g in groups])
    return [lab == f for f in range(min(folds, len(keys)))]


def cross_validate(
    fit: Callable[[list[Any], list[float]], Callable[[Any], float]],
    shapes: Sequence[Any],
    seconds: Sequence[float],
    groups: Sequence[Any],
    seed: int = 0,
) -> FitQuality:
    """Fit on all but one fold of whole shapes, predict it; quality over every held-out row."""
    y = np.asarray(seconds, float)
    pred = np.full(len(y), np.nan)
    for test in heldout_folds(groups, seed=seed):
        train = [i for i in range(len(y)) if not test[i]]
        if len(train) < 4:
            continue
        model = fit([shapes[i] for i in train], [float(y[i]) for i in train])
        for i in np.flatnonzero(test).tolist():
            pred[i] = model(shapes[i])
    ok = np.isfinite(pred)
    full = fit(list(shapes), list(y))
    fitted = np.array([full(s) for s in shapes])
    return quality(fitted, y, pred[ok], y[ok])


# --- rows in the measured tables' column convention (``moe``, ``*_attention``) -------------

ATTENTION_OPS = ("context_attention", "generation_attention")


def moe_shape_of(r: dict[str, Any]) -> MoeShape:
    """A ``moe_perf`` row (num_tokens, hidden_size, inter_size, topk, num_experts,
    moe_tp_size, moe_ep_size) as the shape one of its GPUs runs."""
    ep, tp = int(r.get("moe_ep_size", 1)), int(r.get("moe_tp_size", 1))
    return MoeShape(
        tokens=float(r["num_tokens"]),
        hidden=int(r["hidden_size"]),
        inter=r["inter_size"] / tp,
        top_k=float(r["topk"]),
        experts=int(r["num_experts"]),
        local_experts=r["num_experts"] / ep,
    )


def attn_shape_of(r: dict[str, Any], op: str) -> AttnShape:
    """A ``context_attention`` / ``generation_attention`` row (batch_size, isl, num_heads,
    num_key_value_heads, head_dim, step) as an :class:`AttnShape`."""
    decode = op == "generation_attention"
    d = float(r["head_dim"])
    return AttnShape(
        seqs=float(r["batch_size"]),
        q_len=1.0 if decode else float(r["isl"]),
        ctx=float(r["isl"] + (r.get("step", 0) if decode else 0)),
        heads=float(r["num_heads"]),
        kv_heads=float(r["num_key_value_heads"]),
        qk_dim=d,
        v_dim=d,
    )


def _group(r: dict[str, Any], op: str) -> tuple:
    if op == "moe":
        return (
            r["hidden_size"],
            r["inter_size"],
            r["topk"],
            r["num_experts"],
            r.get("moe_tp_size", 1),
            r.get("moe_ep_size", 1),
        )
    return (r["num_heads"], r["num_key_value_heads"], r["head_dim"])


def fit_rows(
    rows: dict[str, list[dict[str, Any]]],
    seconds: Callable[[str, dict[str, Any]], float],
    seed: int = 0,
) -> KernelFits:
    """Fit :class:`KernelFits` to table-format rows ``{op: [row]}``; ``seconds(op, row)``
    reads a row's latency. Quality: whole shapes held out (:func:`cross_validate`)."""
    out: dict[str, Any] = {}
    qual: dict[str, FitQuality] = {}
    plan: list[tuple[str, str, Callable[[Any, Any], Any], Callable[[dict[str, Any]], Any]]] = [
        ("moe", "moe", fit_moe, moe_shape_of),
        (
            "prefill",
            "context_attention",
            lambda s, y: fit_attention(s, y, decode=False),
            lambda r: attn_shape_of(r, "context_attention"),
        ),
        (
            "decode",
            "generation_attention",
            lambda s, y: fit_attention(s, y, decode=True),
            lambda r: attn_shape_of(r, "generation_attention"),
        ),
    ]
    for key, op, fitter, shape_of in plan:
        rs = rows.get(op) or []
        if len(rs) < 8:
            continue
        shapes = [shape_of(r) for r in rs]
        y = [seconds(op, r) for r in rs]
        qual[key] = cross_validate(fitter, shapes, y, [_group(r, op) for r in rs], seed)
        out[key] = fitter(shapes, y)
    return KernelFits(**out, quality=qual)
