"""Readers for SGLang's expert-distribution recorder dumps (``srt/eplb/expert_distribution.py``).

Layout (as written by SGLang's ``_StatAccumulator.dump`` / ``_DetailAccumulator.dump`` via
``torch.save``):

- ``stat`` / ``stat_approx`` mode, one file from rank 0: ``{"rank", "logical_count":
  int tensor [buffered_steps, num_layers, num_logical_experts],
  "average_utilization_rate_over_window"}``. :func:`read_stat` sums the steps and returns the
  per-layer expert load [num_layers, E] (all decoder layers; dense layers are zero rows).
- ``per_token`` mode, one file per rank: ``{"records": [{"forward_pass_id", "rank",
  "gatherer_key", "input_ids": list, "positions": list, "extend_seq_lens": list | None,
  "forward_mode": int, "topk_ids_of_layer": int tensor [num_layers, T, 8] (-1 padded,
  physical expert ids), "misc_objects", "global_physical_count"}, ...],
  "last_physical_to_logical_map": tensor [num_layers, P]}``. :func:`read_per_token` maps
  physical ids to logical ones with that map, keeps the layers that routed anything (the MoE
  layers) and the first ``top_k`` columns that are ever used.

Request ids: the recorder keeps no request ids (SGLang leaves ``rids`` unrecorded). An extend
(prefill) pass is split into requests by ``extend_seq_lens``; every token of a decode pass
becomes its own request. Positions are the recorded ones.

Files are loaded with ``torch.load(weights_only=True)`` only (never unpickled otherwise);
torch is imported inside the functions, so the planning layers stay torch-free.

Bad bytes: every field is type-, shape- and range-checked before use. Counts must be
finite non-negative integers with one shape across files; ids must be integers, physical ids
must index the physical-to-logical map, logical ids must lie below ``num_experts`` (and below
the int16 limit of :mod:`moeplan.traces.format`) *before* the narrowing cast; every record must
have the first record's layers and k. Each failure is one :class:`MoeplanError` line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.errors import MoeplanError, check_int, require, show
from moeplan.specs.model import MAX_LAYERS, MAX_VOCAB
from moeplan.traces.format import MAX_POSITION, MAX_TOP_K, MAX_TRACE_EXPERTS, RoutingTrace


def _load(path: Path) -> Any:
    import torch

    from moeplan.io import open_regular

    with open_regular(path, "dump path") as fh:  # a FIFO or device: refused, never waited on
        return _torch_load(torch, fh, path)


def _torch_load(torch: Any, fh: Any, path: Path) -> Any:
    try:
        return torch.load(fh, map_location="cpu", weights_only=True)
    except Exception as err:  # damaged file, or objects weights_only refuses
        raise MoeplanError(
            f"dump file ({path}) cannot be read safely: {type(err).__name__}"
        ) from None


def _np(x: Any, field: str, ndim: int | tuple[int, ...], kinds: str = "iu") -> np.ndarray:
    """``x`` as a numpy array of dtype kind in ``kinds`` and ``ndim`` dimensions."""
    try:
        a = x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)
    except (TypeError, ValueError, RuntimeError, AttributeError) as err:
        raise MoeplanError(f"{field} ({show(x)}) is not an array: {type(err).__name__}") from None
    dims = (ndim,) if isinstance(ndim, int) else ndim
    require(
        isinstance(a, np.ndarray) and a.dtype.kind in kinds and a.ndim in dims,
        f"{field} (dtype {getattr(a, 'dtype', '?')}, shape {getattr(a, 'shape', '?')}) "
        f"must be a {'/'.join(map(str, dims))}-d "
        f"{'integer' if kinds == 'iu' else 'numeric'} array",
    )
    return a


def _in_range(field: str, a: np.ndarray, lo: int, hi: int) -> None:
    if a.size:
        amin, amax = int(a.min()), int(a.max())
        require(lo <= amin and amax <= hi, f"{field} (range {amin}..{amax}) must lie in {lo}..{hi}")


def _sum_fits(field: str, total: np.ndarray) -> None:
    """Counts summed (in floating point, which cannot wrap) must stay below 2^62, where their
    int64 sum is exact; a larger sum would wrap around to negative loads."""
    peak = float(total.max()) if total.size else 0.0
    require(peak < 2.0**62, f"{field} (up to {peak:.3g}) must stay below 2^62 (int64 counts)")


def _counts(c_raw: Any, p: Path) -> np.ndarray:
    c = _np(c_raw, f"dump file ({p}) logical_count", (2, 3), kinds="iuf")
    if c.dtype.kind == "f":
        require(
            bool(np.isfinite(c).all()) and bool((c == np.round(c)).all()),
            f"dump file ({p}) logical_count must hold finite whole numbers",
        )
        require(
            c.size == 0 or float(np.abs(c).max()) < 2.0**62,
            f"dump file ({p}) logical_count values must be below 2^62",
        )
    _in_range(f"dump file ({p}) logical_count", c, 0, 2**62)
    c = c.astype(np.int64)
    if c.ndim == 3:
        _sum_fits(f"dump file ({p}) logical_count summed over steps", c.astype(np.float64).sum(0))
        c = c.sum(axis=0)
    require(
        1 <= c.shape[0] <= MAX_LAYERS and 1 <= c.shape[1] <= MAX_TRACE_EXPERTS,
        f"dump file ({p}) logical_count (shape {c.shape}) must be [<= {MAX_LAYERS} layers, "
        f"<= {MAX_TRACE_EXPERTS} experts]",
    )
    return c


def read_stat(paths: Sequence[Path], num_experts: int | None = None) -> np.ndarray:
    """Per-layer expert load [num_layers, E] summed over steps and files."""
    total: np.ndarray | None = None
    for p in paths:
        d = _load(Path(p))
        require(
            isinstance(d, dict) and "logical_count" in d,
            f"dump file ({p}) has no logical_count; is it a stat-mode dump?",
        )
        c = _counts(d["logical_count"], Path(p))
        if total is not None:
            require(
                c.shape == total.shape,
                f"dump file ({p}) logical_count (shape {c.shape}) must match the first "
                f"file's {total.shape}",
            )
        if total is not None:
            _sum_fits("logical_count summed over files", total.astype(np.float64) + c)
        total = c if total is None else total + c
    require(total is not None, "dump paths (0 files) must not be empty")
    assert total is not None
    if num_experts is not None:
        require(
            total.shape[1] == num_experts,
            f"dump experts ({total.shape[1]}) must equal num_experts ({num_experts})",
        )
    return total


def write_load_json(path: Path, load: np.ndarray) -> None:
    """Write ``{"expert_load": [[...] per layer]}`` atomically."""
    from moeplan.io import write_atomic

    write_atomic(path, json.dumps({"expert_load": load.tolist()}))


def _map(d: dict[str, Any], p: Path) -> np.ndarray | None:
    raw = d.get("last_physical_to_logical_map")
    if raw is None:
        return None
    m = _np(raw, f"dump file ({p}) last_physical_to_logical_map", 2)
    require(
        m.shape[0] <= MAX_LAYERS and 1 <= m.shape[1] <= MAX_TRACE_EXPERTS * MAX_TOP_K,
        f"dump file ({p}) last_physical_to_logical_map (shape {m.shape}) is too large",
    )
    _in_range(f"dump file ({p}) last_physical_to_logical_map", m, -1, MAX_TRACE_EXPERTS - 1)
    return m.astype(np.int64)


def _record_rows(rec: Any, where: str, p2l: np.ndarray | None, next_rid: int):
    require(isinstance(rec, dict), f"{where} ({show(rec)}) must be a dict")
    topk = _np(rec["topk_ids_of_layer"], f"{where} topk_ids_of_layer", 3)  # [L, T, K]
    ids = _np(rec["input_ids"], f"{where} input_ids", 1)
    _in_range(f"{where} input_ids", ids, 0, MAX_VOCAB - 1)
    pos = _np(rec.get("positions", np.zeros(len(ids), np.int64)), f"{where} positions", 1)
    _in_range(f"{where} positions", pos, 0, MAX_POSITION)
    require(
        topk.shape[1] == len(ids) == len(pos)
        and topk.shape[0] <= MAX_LAYERS
        and 1 <= topk.shape[2] <= MAX_TOP_K,
        f"{where} topk_ids_of_layer (shape {topk.shape}) must be [<= {MAX_LAYERS} layers, "
        f"{len(ids)} tokens (input_ids), 1..{MAX_TOP_K}] with {len(pos)} positions",
    )
    topk = topk.astype(np.int64)
    if p2l is not None:
        require(
            p2l.shape[0] >= topk.shape[0],
            f"{where} has {topk.shape[0]} layers but the physical-to-logical map {p2l.shape[0]}",
        )
        _in_range(f"{where} topk_ids_of_layer (physical)", topk, -1, p2l.shape[1] - 1)
        layer_idx = np.broadcast_to(np.arange(topk.shape[0])[:, None, None], topk.shape)
        topk = np.where(topk >= 0, p2l[layer_idx, np.maximum(topk, 0)], -1)
    seg = _segments(rec.get("extend_seq_lens"), where)
    if seg is not None and sum(seg) == len(ids):
        rid = np.repeat(np.arange(len(seg)) + next_rid, seg)
        used = len(seg)
    else:
        rid = np.arange(len(ids)) + next_rid
        used = len(ids)
    return rid, pos.astype(np.int64), ids.astype(np.int64), topk.transpose(1, 0, 2), used


def _segments(seg: Any, where: str) -> list[int] | None:
    if seg is None or (hasattr(seg, "__len__") and len(seg) == 0):
        return None
    a = _np(seg, f"{where} extend_seq_lens", 1)
    _in_range(f"{where} extend_seq_lens", a, 0, MAX_POSITION)
    return [int(x) for x in a]


def _is_empty(x: Any) -> bool:
    if x is None:
        return True
    try:
        return len(x) == 0
    except TypeError:  # a scalar: not empty, and _np rejects it with one line
        return False


def _records(d: Any, p: Path) -> list[Any]:
    require(
        isinstance(d, dict) and "records" in d,
        f"dump file ({p}) has no records; is it a per_token-mode dump?",
    )
    recs = d["records"]
    require(
        isinstance(recs, list | tuple),
        f"dump file ({p}) records ({show(recs)}) must be a list of records",
    )
    return list(recs)


def read_per_token(paths: Sequence[Path], num_experts: int | None = None) -> RoutingTrace:
    """Routing trace from per_token dumps (MoE layers only, logical expert ids)."""
    if num_experts is not None:
        check_int("num_experts", num_experts, 1, MAX_TRACE_EXPERTS)
    parts: list[tuple[np.ndarray, ...]] = []
    next_rid = 0
    for p in paths:
        d = _load(Path(p))
        recs = _records(d, Path(p))
        p2l = _map(d, Path(p))
        for i, rec in enumerate(recs):
            where = f"dump file ({p}) record {i}"
            if isinstance(rec, dict) and (
                "topk_ids_of_layer" not in rec or _is_empty(rec.get("input_ids"))
            ):
                continue
            rid, pos, ids, ex, used = _record_rows(rec, where, p2l, next_rid)
            if parts:
                require(
                    ex.shape[1:] == parts[0][3].shape[1:],
                    f"{where} (layers, k = {ex.shape[1:]}) must match the first record's "
                    f"{parts[0][3].shape[1:]}",
                )
            next_rid += used
            parts.append((rid, pos, ids, ex))
    require(bool(parts), "dump (0 per-token records) must not be empty")
    experts = np.concatenate([q[3] for q in parts])  # [N, L_all, K]
    hi = (num_experts if num_experts is not None else MAX_TRACE_EXPERTS) - 1
    _in_range("dump expert ids (logical)", experts, -1, hi)  # before the int16 cast
    moe = np.flatnonzero((experts >= 0).any(axis=(0, 2)))
    cols = np.flatnonzero((experts >= 0).any(axis=(0, 1)))
    require(len(moe) > 0, "dump (no routed experts) must not be empty")
    experts = experts[:, moe][:, :, : int(cols.max()) + 1]
    e = num_experts if num_experts is not None else int(experts.max()) + 1
    return RoutingTrace(
        request_id=np.concatenate([q[0] for q in parts]),
        position=np.concatenate([q[1] for q in parts]).astype(np.int32),
        token_id=np.concatenate([q[2] for q in parts]),
        experts=experts.astype(np.int16),
        num_experts=e,
    )
