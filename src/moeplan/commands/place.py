"""``moeplan place``'s files and flags beyond the placement itself: SGLang's expert-location
map of the Sem-MoE placement and the flags that go with the file, and the token / request
scheduling tables (:func:`moeplan.planners.placement.planner.place` places).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from moeplan.planners.placement.planner import PlacementResult, physical_to_logical


def sglang_flags(path: Path, ep: int, physical: int, num_experts: int) -> list[str]:
    """The SGLang flags that go with an ``--export-sglang`` file of ``physical`` experts per
    layer: the file (absolute, SGLang reads it relative to its own working folder), the EP size
    it was placed for, and the redundant experts when it replicates any."""
    out = ["--init-expert-location", str(path.resolve()), "--ep-size", str(ep)]
    if physical > num_experts:
        out += ["--ep-num-redundant-experts", str(physical - num_experts)]
    return out


def expert_location(res: PlacementResult) -> np.ndarray:
    """The Sem-MoE placement as SGLang's ``physical_to_logical_map`` [layers, physical]."""
    sem = res.methods["semmoe"]
    return physical_to_logical(sem.y if sem.replicas is None else sem.replicas, res.ep)


def schedule_tables(res: PlacementResult) -> dict[str, Any]:
    """The token / request scheduling tables ``--tables`` writes (arrays by name)."""
    arrays = {
        "token_ids": res.token_ids,
        "device": res.token_conf.argmax(axis=1),
        "confidence": res.token_conf,
        "layer_device": res.layer_device,
        "layer_conf": res.layer_conf,
        "expert_device": res.methods["semmoe"].y,
    }
    if res.markov is not None:
        arrays.update(markov_next=res.markov.next, markov_conf=res.markov.conf)
    return arrays
