"""Communication families: engine all-reduce and DeepEP dispatch/combine (see families), and
DeepEP across nodes (:func:`deepep_internode`), transferred from the intra-node tables.

Inter-node DeepEP (normal kernels, DeepEP README "internode"): a rank's tokens for another node
go over RDMA to the rank with the same local index there, which forwards them over NVLink;
the two links run at once. NVIDIA's tables hold only one 8-GPU node, so the inter-node time is
*transferred*: the intra-node analytic model of dispatch and of combine (floor, link
efficiency), learned on the table GPU's NVLink, is moved (:meth:`Analytic.scaled`, the rule
every communication transfer uses: floor x sqrt of the link bandwidth ratio, efficiency
kept) to a device whose
link is the cluster's inter-node bandwidth per GPU, and charged the remote share
``(n - g)/n`` of the bytes; the local share ``(g - 1)/n`` is charged to the cluster GPU's NVLink
model; the longer of the two counts (one direction = the mean of dispatch and combine, as
inside a node). Closed form per direction, with ``a``, ``e`` the floor and link efficiency of
the table GPU (link ``L_ref``) and ``B`` the inter-node bandwidth:
``a sqrt(L_ref / B) + nbytes (n - g) / n / (e B)`` when RDMA is the bottleneck.

Departures: the bytes are what the caller hands over (the cost model's all-to-all convention);
DeepEP sends a token once per destination *node* over RDMA, which a caller that counts
per-expert copies overstates. No internode table exists to hold out, so the prediction carries
no error figure; the test compares it with DeepEP's published RDMA bandwidth on H800.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from moeplan.cost.kerneldb.base import BF16_BYTES, Columns, Features
from moeplan.cost.kerneldb.base import col as _f
from moeplan.cost.kerneldb.base import l2 as _l2
from moeplan.cost.kerneldb.sources import Prediction

#: the kernel DB, its device record and fitted model, named in annotations only: db and fit
#: import this module through families, so importing them here would close a circle
KernelDB = Any
Device = Any
Analytic = Any

DEEPEP_RANKS = 8  # node_num 1: one 8-GPU NVLink node
DEEPEP_OPS = ("deepep_normal_dispatch", "deepep_normal_combine")
#: the SM budget of the normal kernels read from the tables (measured at 4-24 SMs): DeepEP's
#: own setting, deepseek-ai/DeepEP @ 567632dd README.md:134 ``Buffer.set_num_sms(24)`` and
#: tests/test_internode.py:322 ``num_sms = 24``. SGLang without ``--deepep-config`` keeps
#: DeepEP's class default ``Buffer.num_sms = 20`` (deep_ep/buffer.py:30; SGLang
#: ``DeepEPConfig.num_sms = Buffer.num_sms``, python/sglang/srt/layers/moe/token_dispatcher/
#: deepep.py): the difference is one row of bench/bench_published.py's sensitivity table
DEEPEP_SMS = "24"


def _allreduce(cols: Columns) -> Features:
    m, n = _f(cols, "message_size"), _f(cols, "num_gpus")
    z = np.zeros_like(m)
    return Features(
        flops=z,
        nbytes=2 * (n - 1) / n * BF16_BYTES * m,
        work=z,
        fp8=np.zeros(len(m), bool),
        tokens=m,
        coords=np.stack([_l2(m), _l2(n)], 1),
    )


def dest_ranks(num_experts: np.ndarray, topk: np.ndarray, ranks: int = DEEPEP_RANKS) -> np.ndarray:
    """Expected distinct ranks among a token's ``topk`` experts (uniform, without repeats)."""
    e, k = np.asarray(num_experts, float), np.asarray(topk, float)
    miss = np.ones_like(e)
    for i in range(int(k.max(initial=0))):
        with np.errstate(divide="ignore", invalid="ignore"):
            term = np.nan_to_num(np.clip((e - e / ranks - i) / (e - i), 0.0, 1.0))
        miss = np.where(i < k, miss * term, miss)
    return ranks * (1.0 - miss)


def _deepep(per_rank: bool, elem_bytes: float) -> Callable[[Columns], Features]:
    def feats(cols: Columns) -> Features:
        t, h = _f(cols, "num_token"), _f(cols, "hidden_size")
        k, e = _f(cols, "num_topk"), _f(cols, "num_experts")
        copies = dest_ranks(e, k) * (DEEPEP_RANKS - 1) / DEEPEP_RANKS if per_rank else k
        z = np.zeros_like(t)
        coords = np.stack([_l2(t), _l2(h), _l2(k), _l2(e)], 1)
        return Features(
            flops=z,
            nbytes=t * copies * h * elem_bytes,
            work=t,
            fp8=np.zeros(len(t), bool),
            tokens=t,
            coords=coords,
        )

    return feats


def link_seconds(model: Analytic, device: Device, nbytes: float) -> float:
    """The analytic model of a link family on ``nbytes`` (no FLOPs, no per-token work)."""
    if nbytes <= 0:
        return 0.0
    one = np.zeros(1)
    f = Features(
        flops=one,
        nbytes=np.array([nbytes]),
        work=one,
        fp8=np.zeros(1, bool),
        tokens=one,
        coords=np.zeros((1, 4)),
    )
    return float(model.predict(f, device, True)[0])


def internode_seconds(
    model: Analytic,
    ref: Device,
    device: Device,
    inter_bw: float,
    nbytes: float,
    ranks: int,
    nodes: int,
) -> float:
    """One DeepEP kernel over ``ranks`` GPUs on ``nodes`` full nodes (module docstring):
    ``model`` fitted on GPU ``ref``'s NVLink; ``device`` the cluster's GPU; ``inter_bw`` its
    inter-node bytes/s per GPU per direction; ``nbytes`` per rank, own shard included."""
    g = ranks // nodes
    rdma = replace(device, link_bw=inter_bw)
    t_rdma = link_seconds(model.scaled(ref, rdma, True), rdma, nbytes * (ranks - g) / ranks)
    t_nvl = link_seconds(model.scaled(ref, device, True), device, nbytes * (g - 1) / ranks)
    return max(t_rdma, t_nvl)


def deepep_internode(
    db: KernelDB, device: Device, engine: str, nbytes: float, nodes: int, inter_bw: float
) -> Prediction | None:
    """One direction of a DeepEP normal all-to-all over ``nodes`` 8-GPU nodes (mean of
    dispatch and combine), source ``transferred``; ``None`` without the intra-node tables."""
    times = []
    for op in DEEPEP_OPS:
        key = db.choose(device.reference, engine, op, {"sms": DEEPEP_SMS})
        vm = db.variant(device.reference, engine, op, key) if key else None
        if vm is None:
            return None
        times.append(
            internode_seconds(
                vm.model, vm.device, device, inter_bw, nbytes, DEEPEP_RANKS * nodes, nodes
            )
        )
    return Prediction(
        seconds=float(np.mean(times)),
        source="transferred",
        detail=f"DeepEP normal internode ({nodes} nodes): intra-node model "
        "moved to the RDMA link, no held-out rows",
    )
