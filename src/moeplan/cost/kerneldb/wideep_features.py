"""TRT-LLM's wide-EP MoE features (op ``trtllm_wideep_moe``; the family overview is
:mod:`.families`).

TRT-LLM's ``WideEPMoE`` (tensorrt_llm/_torch/modules/fused_moe/fused_moe_wide_ep.py) runs the
CUTLASS MoE on the tokens the all-to-all (DeepEP on Hopper without multi-node NVLink:
``AlltoallMethodType.DeepEP`` / ``DeepEPLowLatency``) delivered to the rank, over its
``S / ep`` weight slots (``S = num_slots``: ``E`` experts plus redundant replicas). NVIDIA's
table (``moe/trtllm/1.3.0rc10/wideep_moe_perf``) times rank 0 given the routing of
``num_tokens`` tokens entering the EP group; the all-to-all is not in it.

SwiGLU on the busiest rank: FLOPs ``6 P H I``, bytes ``hit 3 H I w + 4 P H`` (the rank's
slots' weights and the ``P`` permuted rows in and out), work ``P H`` (permutation and
finalisation per routed row) — ``P`` pairs and ``hit`` slots holding one, from the load the
rows were collected with: ``power_law_<alpha>`` (:mod:`.load`, contiguous experts, the
busiest rank) or ``power_law_<alpha>_eplb`` (:mod:`.eplb_load`, replication to ``S`` slots
and greedy placement), or ``explicit`` (``rank_pairs`` / ``rank_hit`` given: a query's own
load). Coordinates as the fused MoE's with slots per rank and an EPLB flag.
"""

from __future__ import annotations

import numpy as np

from moeplan.cost.kerneldb.base import BF16_BYTES, Columns, Features
from moeplan.cost.kerneldb.base import col as _f
from moeplan.cost.kerneldb.base import l2 as _l2
from moeplan.cost.kerneldb.eplb_load import eplb_power_law_many
from moeplan.cost.kerneldb.load import busiest_rank_many, power_law_alpha
from moeplan.cost.kerneldb.moe_features import EXPLICIT, WEIGHT_BYTES, WORK_HIDDEN, rate_tier
from moeplan.errors import MoeplanError

EPLB_SUFFIX = "_eplb"


def _load(cols: Columns, dist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, e, k = _f(cols, "num_tokens"), _f(cols, "num_experts"), _f(cols, "topk")
    ep, slots = _f(cols, "moe_ep_size"), _f(cols, "num_slots")
    pairs, hit = np.empty(len(n)), np.empty(len(n))
    explicit = dist == EXPLICIT
    eplb = np.char.endswith(dist, EPLB_SUFFIX)
    plain = ~(explicit | eplb)
    if explicit.any():
        if not {"rank_pairs", "rank_hit"} <= set(cols):
            raise MoeplanError(f"distribution ({EXPLICIT!r}) needs rank_pairs and rank_hit")
        pairs[explicit] = np.asarray(cols["rank_pairs"], float)[explicit]
        hit[explicit] = np.asarray(cols["rank_hit"], float)[explicit]
    if eplb.any():
        alpha = np.array([power_law_alpha(d.removesuffix(EPLB_SUFFIX)) for d in dist[eplb]])
        pairs[eplb], hit[eplb] = eplb_power_law_many(
            n[eplb], e[eplb], k[eplb], ep[eplb], alpha, slots[eplb]
        )
    if plain.any():
        pairs[plain], hit[plain] = busiest_rank_many(
            n[plain], slots[plain], k[plain], ep[plain], dist[plain]
        )
    return pairs, hit


def _trtllm_wideep(cols: Columns) -> Features:
    n, h = _f(cols, "num_tokens"), _f(cols, "hidden_size")
    inter = _f(cols, "inter_size") / _f(cols, "moe_tp_size")
    k, ep, slots = _f(cols, "topk"), _f(cols, "moe_ep_size"), _f(cols, "num_slots")
    dist = np.asarray(cols["distribution"]).astype(str)
    pairs, hit = _load(cols, dist)
    dtype = np.asarray(cols["moe_dtype"]).astype(str)
    wbytes = np.array([WEIGHT_BYTES.get(d, BF16_BYTES) for d in dtype])
    base = np.array([d.removesuffix(EPLB_SUFFIX) for d in dist])
    code = np.array(
        [0.0 if d in ("balanced", "uniform", EXPLICIT) else 3.0 - 4.0 * (float(d[10:]) - 1.0)
         for d in base]
    )  # fmt: skip
    eplb = np.char.endswith(dist, EPLB_SUFFIX).astype(float)
    coords = np.stack([_l2(n), _l2(h), _l2(inter), _l2(slots / ep), _l2(k), _l2(ep), code, eplb], 1)
    return Features(
        flops=6.0 * pairs * h * inter,
        nbytes=hit * 3 * h * inter * wbytes + 2 * BF16_BYTES * pairs * h,
        work=pairs * h / WORK_HIDDEN,
        fp8=rate_tier(dtype),
        tokens=n,
        coords=coords,
    )
