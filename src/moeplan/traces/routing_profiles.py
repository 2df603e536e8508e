"""Per-layer mean activated experts (dynamic top-k) for SMIDT's cost tables.

SMIDT (paper 001, §3, Fig. 2) observes that dynamic top-k routing activates a different mean
number of experts in every MoE layer; its planner profiles those means at runtime. moeplan
builds the same :class:`moeplan.specs.RoutingProfile` (``mean_k`` per MoE layer) three ways,
all pure functions (file reading lives in the CLI):

* :func:`mean_k_from_trace` — from a routing trace: expert ids per token per layer, ``-1``
  padded for dynamic k (DESIGN.md trace format), either dense ``[tokens, layers, k_max]`` or
  columnar rows ``experts[rows, k_max]`` with a ``layer[rows]`` column.
* :func:`mean_k_from_shape` — a parametric layer shape (flat, ramp, valley, wave) around a mean.
* :func:`synthetic_top_p_mean_k` — Top-P routing (:mod:`moeplan.traces.topp`) applied to
  seeded synthetic router logits whose sharpness varies by layer; used by ``--top-p`` when no
  measured profile is given. Departure: the paper measures real checkpoints; no weights can be
  downloaded here, so the sharpness schedule is an assumption stated in the profile's source.

:func:`profile_from_dict` / :func:`profile_to_dict` convert the JSON layout
``{"schema": "moeplan.routing_profile/1", "top_k", "mean_k": [...], "source", "note"}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from moeplan.errors import MoeplanError, check_float, check_int, require
from moeplan.specs.workload import RoutingProfile
from moeplan.traces.topp import softmax, top_p_counts

SCHEMA = "moeplan.routing_profile/1"
SHAPES = ("flat", "ramp", "valley", "wave")


def mean_k_from_trace(
    experts: np.ndarray, layer: np.ndarray | None = None, num_layers: int | None = None
) -> tuple[float, ...]:
    """Mean number of valid (``>= 0``) expert ids per token, per layer.

    Args:
        experts: ``[tokens, layers, k_max]`` ids (dense), or ``[rows, k_max]`` with ``layer``.
        layer: ``[rows]`` MoE-layer index of each row (columnar form only).
        num_layers: number of MoE layers (columnar form; default ``max(layer) + 1``).
    Returns:
        ``mean_k`` per layer. A layer without rows is an error.
    """
    ids = np.asarray(experts)
    if layer is None:
        require(ids.ndim == 3, f"trace.experts.ndim ({ids.ndim}) must be 3 without a layer column")
        require(ids.shape[0] >= 1, "trace.experts must hold at least one token")
        return tuple(float(v) for v in (ids >= 0).sum(axis=2).mean(axis=0))
    lay = np.asarray(layer, dtype=np.int64)
    require(ids.ndim == 2, f"trace.experts.ndim ({ids.ndim}) must be 2 with a layer column")
    require(
        lay.shape == (ids.shape[0],),
        f"trace.layer length ({lay.shape[0]}) must equal trace.experts rows ({ids.shape[0]})",
    )
    require(lay.size > 0 and lay.min() >= 0, "trace.layer must be non-empty and non-negative")
    n = int(lay.max()) + 1 if num_layers is None else int(num_layers)
    require(int(lay.max()) < n, f"trace.layer max ({int(lay.max())}) must be < num_layers ({n})")
    rows = np.bincount(lay, minlength=n)
    empty = np.flatnonzero(rows == 0)
    if empty.size:
        raise MoeplanError(f"trace.layer ({int(empty[0])}) has no rows; every layer needs tokens")
    valid = np.bincount(lay, weights=(ids >= 0).sum(axis=1), minlength=n)
    return tuple(float(v) for v in valid / rows)


def mean_k_from_shape(
    num_layers: int,
    top_k: int,
    *,
    mean: float,
    amplitude: float = 0.0,
    shape: str = "flat",
    k_min: float = 1.0,
) -> tuple[float, ...]:
    """Parametric per-layer mean k: ``mean + amplitude * f(x)`` clipped to ``[k_min, top_k]``.

    ``x = i / (num_layers - 1)``; ``f`` is 0 (flat), ``2x - 1`` (ramp), ``-cos(pi(2x-1))``-like
    dip in the middle (valley: ``2|2x-1| - 1``) or ``sin(2 pi x)`` (wave).
    """
    require(num_layers >= 1, f"num_layers ({num_layers}) must be >= 1")
    require(shape in SHAPES, f"shape ({shape!r}) must be one of {SHAPES}")
    require(
        0 < k_min <= mean <= top_k, f"mean ({mean}) must be in [k_min ({k_min}), top_k ({top_k})]"
    )
    x = np.linspace(0.0, 1.0, num_layers) if num_layers > 1 else np.zeros(1)
    f = {
        "flat": np.zeros_like(x),
        "ramp": 2 * x - 1,
        "valley": 2 * np.abs(2 * x - 1) - 1,
        "wave": np.sin(2 * np.pi * x),
    }[shape]
    return tuple(float(v) for v in np.clip(mean + amplitude * f, k_min, top_k))


def synthetic_top_p_mean_k(
    num_layers: int,
    num_experts: int,
    p: float,
    *,
    k_max: int,
    k_min: int = 1,
    tokens: int = 1024,
    seed: int = 0,
    sharpness: tuple[float, float] = (0.5, 4.0),
) -> tuple[float, ...]:
    """Mean k per layer from Top-P routing over synthetic router logits.

    Logits are ``N(0, s_l^2)`` per token and expert, with the scale ``s_l`` of layer ``l``
    following a seeded smooth wave between ``sharpness[0]`` (flat routers: many experts needed)
    and ``sharpness[1]`` (peaked routers: few experts). Deterministic for a given seed.
    """
    if not (0.0 < float(p) <= 1.0):
        raise MoeplanError(f"top_p ({p}) must be in (0, 1]")
    require(num_layers >= 1 and num_experts >= 1, "num_layers and num_experts must be >= 1")
    rng = np.random.default_rng(seed)
    x = np.linspace(0.0, 1.0, num_layers)
    phase = rng.uniform(0, 2 * np.pi, size=3)
    wave = sum(np.sin((j + 1) * np.pi * x + phase[j]) / (j + 1) for j in range(3))
    wave = (wave - wave.min()) / max(float(np.ptp(wave)), 1e-12)
    scales = sharpness[0] + (sharpness[1] - sharpness[0]) * wave
    out = []
    for s in scales:
        probs = softmax(rng.standard_normal((tokens, num_experts)) * s)
        out.append(float(top_p_counts(probs, p, k_min=k_min, k_max=k_max).mean()))
    return tuple(out)


def profile_from_dict(
    data: Mapping, *, num_moe_layers: int | None = None, top_k: int | None = None
) -> RoutingProfile:
    """Validate a routing-profile JSON object and build the RoutingProfile.

    ``num_moe_layers`` / ``top_k`` (the model's) are checked when given: a profile for another
    model (wrong length) is a user error.
    """
    require(isinstance(data, Mapping), "routing profile must be a JSON object")
    schema = data.get("schema", SCHEMA)
    require(schema == SCHEMA, f"routing_profile.schema ({schema!r}) must be {SCHEMA!r}")
    mean_k = data.get("mean_k")
    require(
        isinstance(mean_k, Sequence) and not isinstance(mean_k, str) and len(mean_k) > 0,
        "routing_profile.mean_k must be a non-empty list of numbers",
    )
    assert mean_k is not None  # checked just above
    vals = tuple(check_float(f"routing_profile.mean_k[{i}]", v) for i, v in enumerate(mean_k))
    k = check_int(
        "routing_profile.top_k",
        data.get("top_k", top_k if top_k is not None else max(1, round(max(vals)))),
        1,
        1024,
    )
    if num_moe_layers is not None:
        require(
            len(vals) == num_moe_layers,
            f"routing_profile.mean_k length ({len(vals)}) must equal the model's "
            f"MoE layers ({num_moe_layers})",
        )
    if top_k is not None:
        require(k == top_k, f"routing_profile.top_k ({k}) must equal the model's top_k ({top_k})")
    for i, v in enumerate(vals):
        require(np.isfinite(v) and v > 0, f"routing_profile.mean_k[{i}] ({v}) must be > 0")
    return RoutingProfile(top_k=k, mean_k=vals, source=str(data.get("source", "file")))


def profile_to_dict(profile: RoutingProfile, *, model: str = "", note: str = "") -> dict:
    """JSON layout of a dynamic-top-k profile (inverse of :func:`profile_from_dict`)."""
    mean_k = profile.mean_k if profile.mean_k is not None else (float(profile.top_k),)
    return {
        "schema": SCHEMA,
        "model": model,
        "top_k": profile.top_k,
        "mean_k": [round(float(v), 4) for v in mean_k],
        "source": profile.source,
        "note": note,
    }
