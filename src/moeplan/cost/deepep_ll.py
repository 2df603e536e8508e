"""DeepEP's low-latency dispatch and combine across nodes, from DeepEP's published figures.

NVIDIA's DeepEP tables measure one 8-GPU node. Across nodes the low-latency kernels send
every routed copy straight to its rank over RDMA, and DeepEP publishes what that costs on the
same kernels: H800 with ConnectX-7 InfiniBand 400 Gb/s (50 GB/s per GPU), 128 tokens per
rank, hidden 7168, top-8, FP8 dispatch and BF16 combine, EP 8 to 256
(:data:`PUBLISHED`; github.com/deepseek-ai/DeepEP docs/legacy.md at commit 0297fc8, the V1
README table, transcribed in the shared data's ``deepep_published_bandwidth.json``
``v1_low_latency_h800``). Its "RDMA bandwidth" column is every routed copy's bytes over the
latency: 128 x 8 x (7168 + 7168 / 128 x 4) bytes / 77 µs = 98 GB/s at EP8 dispatch, 128 x 8 x
7168 x 2 / 114 µs = 129 (published 127) combine — so the published rate is the rate of the
copies a rank receives, local ones included.

Price of one direction with ``T`` tokens per rank at EP ``ep`` (:func:`ll_seconds`):

- the rank's bytes ``T k H e`` (``e`` = 1 + 4/128 dispatch, 2 combine) times the busiest
  receiver's load over the mean, divided by the published rate at ``ep`` (interpolated
  linearly in ``log2 ep`` between the published EPs, the end rows beyond them), scaled by the
  cluster's RDMA bandwidth per GPU over 50 GB/s;
- the published runs route at random (DeepEP tests/test_low_latency.py draws random scores),
  so their latency already holds the spread of one batch: the busiest rank of 128 x ``ep``
  tokens over ``ep`` ranks (:func:`moeplan.cost.ep_spread.balanced_spread`, 256 experts:
  1.07-1.08 at EP16-256). The caller's load (which carries that spread under random routing)
  is divided by it;
- never below ``floor``, the caller's intra-node price of the same tokens (the measured
  NVLink table: a small batch's time is the kernel's fixed cost, not its bytes).

Held-out error: none measured (no inter-node DeepEP table exists); the rows are exact at the
published points of 128 tokens (``tests/test_wideep.py``) and DeepSeek's H800 decode profile
checks the whole step (``bench/bench_published.py``). Departures: the published tables hold
pure-RDMA kernels (intra-node copies over the NIC too), what DeepEP V1's low-latency mode runs;
the rate at ``T`` other than 128 is taken as the rate at 128 (bandwidth-bound there: 39-48
GB/s at EP >= 32 of the NIC's 50). Pure: no I/O.
"""

from __future__ import annotations

import math

import numpy as np

from moeplan.cost.ep_spread import balanced_spread

#: DeepEP V1 low-latency kernels, H800 + CX7 IB 400 Gb/s, 128 tokens per rank, hidden 7168,
#: top-8, FP8 dispatch / BF16 combine, pure RDMA: (EP, dispatch µs, combine µs) — DeepEP
#: docs/legacy.md @ 0297fc801788b14b338a46554faca28d419e518a (README of V1)
PUBLISHED = (
    (8, 77.0, 114.0),
    (16, 118.0, 195.0),
    (32, 155.0, 273.0),
    (64, 173.0, 314.0),
    (128, 192.0, 369.0),
    (256, 194.0, 360.0),
)
PUBLISHED_NIC = 50e9  # ConnectX-7 400 Gb/s per GPU (DeepEP README setting)
PUBLISHED_TOKENS, PUBLISHED_HIDDEN, PUBLISHED_TOPK = 128, 7168, 8
PUBLISHED_EXPERTS = 256  # DeepSeek-V3's routed experts (the README's "production setting")
DISPATCH_BYTES = 1.0 + 4.0 / 128  # fp8 values and one fp32 scale per 128
COMBINE_BYTES = 2.0  # bf16


def published_seconds(ep: float, direction: str) -> float:
    """DeepEP's published latency at ``ep`` ranks (interpolated in ``log2 ep``; the end rows
    beyond the published range), seconds."""
    col = 1 if direction == "dispatch" else 2
    x = np.log2([r[0] for r in PUBLISHED])
    y = [r[col] for r in PUBLISHED]
    return float(np.interp(math.log2(max(ep, 1.0)), x, y)) * 1e-6


def published_spread(ep: int) -> float:
    """The busiest rank of a published run's batch over the mean (module docstring)."""
    return balanced_spread(PUBLISHED_TOKENS * ep, ep, PUBLISHED_TOPK, PUBLISHED_EXPERTS)


def ll_seconds(
    tokens: float,
    hidden: int,
    top_k: int,
    ep: int,
    direction: str,
    load: float,
    rdma_bw: float,
    floor: float,
) -> float:
    """One low-latency ``direction`` across nodes (module docstring): ``tokens`` per rank,
    ``load`` the busiest receiver's copies over the mean, ``rdma_bw`` the cluster's RDMA
    bytes/s per GPU, ``floor`` the intra-node price of the same tokens."""
    elem = DISPATCH_BYTES if direction == "dispatch" else COMBINE_BYTES
    ref_bytes = PUBLISHED_TOKENS * PUBLISHED_TOPK * PUBLISHED_HIDDEN * elem
    rate = ref_bytes / published_seconds(ep, direction) * (rdma_bw / PUBLISHED_NIC)
    nbytes = tokens * top_k * hidden * elem * load / published_spread(ep)
    return max(nbytes / rate, floor)
