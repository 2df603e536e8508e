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
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.errors import MoeplanError, require
from moeplan.traces.format import RoutingTrace


def _load(path: Path) -> Any:
    import torch

    require(path.exists(), f"dump path ({path}) does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # damaged file, or objects weights_only refuses
        raise MoeplanError(f"dump file ({path}) cannot be read safely: "
                           f"{type(err).__name__}") from None


def _np(x: Any) -> np.ndarray:
    return x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)


def read_stat(paths: Sequence[Path], num_experts: int | None = None) -> np.ndarray:
    """Per-layer expert load [num_layers, E] summed over steps and files."""
    total: np.ndarray | None = None
    for p in paths:
        d = _load(Path(p))
        require(isinstance(d, dict) and "logical_count" in d,
                f"dump file ({p}) has no logical_count; is it a stat-mode dump?")
        c = _np(d["logical_count"]).astype(np.int64)
        c = c.sum(axis=0) if c.ndim == 3 else c
        require(c.ndim == 2, f"dump logical_count (shape {c.shape}) must be [steps, L, E]")
        total = c if total is None else total + c
    require(total is not None, "dump paths (0 files) must not be empty")
    assert total is not None
    if num_experts is not None:
        require(total.shape[1] == num_experts,
                f"dump experts ({total.shape[1]}) must equal num_experts ({num_experts})")
    return total


def write_load_json(path: Path, load: np.ndarray) -> None:
    """Write ``{"expert_load": [[...] per layer]}`` atomically."""
    from moeplan.io import write_atomic

    write_atomic(path, json.dumps({"expert_load": load.tolist()}))


def _record_rows(rec: dict[str, Any], p2l: np.ndarray | None, next_rid: int):
    topk = _np(rec["topk_ids_of_layer"]).astype(np.int64)  # [L, T, K]
    ids = np.asarray(rec["input_ids"], dtype=np.int64)
    pos = np.asarray(rec.get("positions", np.zeros(len(ids))), dtype=np.int64)
    require(topk.ndim == 3 and topk.shape[1] == len(ids),
            f"per_token record topk_ids_of_layer (shape {topk.shape}) must be "
            f"[layers, {len(ids)} tokens, k]")
    if p2l is not None:
        valid = topk >= 0
        layer_idx = np.broadcast_to(np.arange(topk.shape[0])[:, None, None], topk.shape)
        topk = np.where(valid, p2l[layer_idx, np.maximum(topk, 0)], -1)
    seg = rec.get("extend_seq_lens")
    if seg and sum(seg) == len(ids):
        rid = np.repeat(np.arange(len(seg)) + next_rid, seg)
        used = len(seg)
    else:
        rid = np.arange(len(ids)) + next_rid
        used = len(ids)
    return rid, pos, ids, topk.transpose(1, 0, 2), used


def read_per_token(paths: Sequence[Path], num_experts: int | None = None) -> RoutingTrace:
    """Routing trace from per_token dumps (MoE layers only, logical expert ids)."""
    parts: list[tuple[np.ndarray, ...]] = []
    next_rid = 0
    e_max = 0
    for p in paths:
        d = _load(Path(p))
        require(isinstance(d, dict) and "records" in d,
                f"dump file ({p}) has no records; is it a per_token-mode dump?")
        p2l = d.get("last_physical_to_logical_map")
        p2l_np = None if p2l is None else _np(p2l).astype(np.int64)
        for rec in d["records"]:
            if "topk_ids_of_layer" not in rec or len(rec.get("input_ids", [])) == 0:
                continue
            rid, pos, ids, ex, used = _record_rows(rec, p2l_np, next_rid)
            next_rid += used
            e_max = max(e_max, int(ex.max(initial=-1)) + 1)
            parts.append((rid, pos, ids, ex))
    require(bool(parts), "dump (0 per-token records) must not be empty")
    experts = np.concatenate([q[3] for q in parts])  # [N, L_all, K]
    moe = np.flatnonzero((experts >= 0).any(axis=(0, 2)))
    cols = np.flatnonzero((experts >= 0).any(axis=(0, 1)))
    require(len(moe) > 0, "dump (no routed experts) must not be empty")
    experts = experts[:, moe][:, :, : int(cols.max()) + 1]
    e = num_experts if num_experts is not None else e_max
    return RoutingTrace(request_id=np.concatenate([q[0] for q in parts]),
                        position=np.concatenate([q[1] for q in parts]).astype(np.int32),
                        token_id=np.concatenate([q[2] for q in parts]),
                        experts=experts.astype(np.int16), num_experts=e)


def find_dumps(folder: str | os.PathLike[str]) -> list[Path]:
    """SGLang's dump files in a folder (``expert_distribution_recorder_*.pt``), sorted."""
    return sorted(Path(folder).glob("expert_distribution_recorder_*.pt"))
