"""Exports of a Sem-MoE placement: SGLang ``--init-expert-location`` JSON and the schedulers'
tables. Every file is written atomically (temp file in the same folder + ``os.replace``).

SGLang (``srt/eplb/expert_location.py``, ``compute_initial_expert_location_metadata``) reads a
JSON object with ``physical_to_logical_map`` of shape [num_layers, num_physical_experts], where
``num_layers`` is the model's ``num_hidden_layers`` (dense layers included) and physical expert
p lives on GPU p // (num_physical_experts / ep_size): equal experts per GPU. Rows of dense
layers carry the trivial map (they are never read for routing).

Tables (``.npz``, no pickle): ``token_table`` holds ``token_ids`` [V], ``device`` [V] (arg-max)
and ``confidence`` [V, C] (P(device | token), the attention-DP request-scheduling table),
plus the attention-TP tables ``layer_device`` / ``layer_conf`` [L, V] and the Markov table
``markov_next`` / ``markov_conf`` [L, C**lookback] when present.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.errors import require
from moeplan.io import atomic_path, write_atomic


def sglang_expert_location(
    phy2log_moe: np.ndarray, *, ep: int, num_hidden_layers: int, moe_layers: Sequence[int]
) -> dict[str, Any]:
    """The JSON object: MoE layers' rows from ``phy2log_moe`` [L_moe, P], others trivial."""
    num_moe, num_phy = phy2log_moe.shape
    require(
        num_moe == len(moe_layers),
        f"placement layers ({num_moe}) must equal the model's MoE layers ({len(moe_layers)})",
    )
    require(
        num_phy % ep == 0,
        f"physical experts ({num_phy}) must be divisible by ep ({ep}) (equal per GPU)",
    )
    num_log = int(phy2log_moe.max()) + 1
    trivial = (np.arange(num_phy) % num_log).tolist()
    rows = [trivial for _ in range(num_hidden_layers)]
    for i, layer in enumerate(moe_layers):
        require(
            0 <= layer < num_hidden_layers,
            f"moe layer ({layer}) must lie in 0..{num_hidden_layers - 1}",
        )
        rows[layer] = [int(v) for v in phy2log_moe[i]]
    return {"physical_to_logical_map": rows}


def write_sglang_expert_location(
    path: str | os.PathLike[str],
    phy2log_moe: np.ndarray,
    *,
    ep: int,
    num_hidden_layers: int,
    moe_layers: Sequence[int],
) -> Path:
    """Write the ``--init-expert-location`` JSON atomically."""
    obj = sglang_expert_location(
        phy2log_moe, ep=ep, num_hidden_layers=num_hidden_layers, moe_layers=moe_layers
    )
    return write_atomic(path, json.dumps(obj))


def write_tables(path: str | os.PathLike[str], **arrays: np.ndarray) -> Path:
    """Write named numpy tables to one ``.npz`` atomically."""
    path = Path(path)
    require(path.suffix == ".npz", f"table path ({path}) must end in .npz")
    named: dict[str, Any] = arrays  # typed so mypy keeps savez's keyword arguments apart
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **named)
    return Path(path)


def read_tables(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read tables written by :func:`write_tables` (no pickle)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
