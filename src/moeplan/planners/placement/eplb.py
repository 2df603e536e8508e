"""DeepSeek EPLB (expert-parallelism load balancer) in numpy.

Reimplements ``rebalance_experts`` of deepseek-ai/EPLB (``eplb.py``) with the same semantics
and tie-breaking, so it reproduces the published example and vLLM's cases exactly
(``/work/shared/data/eplb_reference_vectors.json``). Used by Sem-MoE (paper 002, §4.3) as a
load-balancing baseline.

Two policies, as in the original:
- hierarchical (``num_groups % num_nodes == 0``): pack expert groups to nodes, replicate the
  heaviest experts within each node, pack physical experts to the node's GPUs;
- global (otherwise): the same with one group and one node.

Arithmetic is float32 as in the reference (``weight.float()``): group sums, pack weights,
per-replica loads ``weight / logcnt``. ``argmax`` ties take the first index, as ``torch.max``.

Where it differs from deepseek-ai/EPLB, exactly (issue 16: 38 of 55 random integer inputs):
``balanced_packing`` visits items by descending weight. The reference uses
``torch.sort(descending=True)``, whose order among *equal* weights is unspecified (stable
for up to 16 items on CPU, not beyond; CUDA and torch versions differ); here equal weights
are visited by ascending index (a stable sort), the same on every machine. What that changes:

- global policy (``num_groups = 1`` or not divisible by ``num_nodes``): only items of equal
  weight trade places, so every GPU's load and the replica count of experts of each weight
  are identical to the reference; which of two equal experts sits on a slot, and the replica
  order in ``log2phy``, can differ;
- hierarchical policy: step 1 can swap two *groups* of equal total load but different
  experts, and step 2's "first index" among experts of equal per-replica load follows the
  resulting order, so only each *node's* load is guaranteed identical; GPU loads can differ
  (as they can between two torch builds running the reference).

``argsort_desc`` lets a caller pass the reference's order (e.g. ``torch.sort``'s indices)
to reproduce one torch run bit for bit. Tests pin: the reference vectors exactly; identical
node loads under any tie order and identical GPU loads in the global policy (hypothesis);
identical GPU loads against torch.sort's order on 55 random 64-expert inputs.

Departure: bad arguments raise :class:`moeplan.errors.MoeplanError` (a ValueError) naming the
field instead of ``AssertionError``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from moeplan.errors import require

ArgsortDesc = Callable[[np.ndarray], np.ndarray]


def stable_desc(w: np.ndarray) -> np.ndarray:
    """Indices by descending weight per row; ties by ascending index (module docstring)."""
    return np.argsort(-w, axis=-1, kind="stable")


def balanced_packing(
    weight: np.ndarray, num_packs: int, argsort_desc: ArgsortDesc = stable_desc
) -> tuple[np.ndarray, np.ndarray]:
    """Pack ``n`` weighted items into ``num_packs`` packs of ``n / num_packs`` items each.

    weight: [X, n]; n divisible by num_packs. Returns (pack_index, rank_in_pack), both [X, n].
    Greedy: heaviest item first, into the lightest pack that still has room.
    """
    num_layers, num_groups = weight.shape
    require(
        num_groups % num_packs == 0,
        f"eplb items ({num_groups}) must be divisible by packs ({num_packs})",
    )
    per_pack = num_groups // num_packs
    if per_pack == 1:
        idx = np.broadcast_to(np.arange(num_groups), weight.shape).copy()
        return idx, np.zeros_like(idx)
    pack_index = np.full(weight.shape, -1, dtype=np.int64)
    rank_in_pack = np.full(weight.shape, -1, dtype=np.int64)
    order = argsort_desc(weight)
    for i in range(num_layers):
        pack_w = [np.float32(0.0)] * num_packs
        pack_n = [0] * num_packs
        for g in order[i]:
            pack = min(
                (p for p in range(num_packs) if pack_n[p] < per_pack), key=pack_w.__getitem__
            )
            pack_index[i, g] = pack
            rank_in_pack[i, g] = pack_n[pack]
            pack_w[pack] = np.float32(pack_w[pack] + weight[i, g])
            pack_n[pack] += 1
    return pack_index, rank_in_pack


def replicate_experts(
    weight: np.ndarray, num_phy: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Add ``num_phy - num_log`` replicas, each to the expert with max load per replica.

    Returns phy2log [X, num_phy], rank [X, num_phy] (replica index), logcnt [X, num_log].
    """
    n, num_log = weight.shape
    require(num_phy >= num_log, f"eplb num_replicas ({num_phy}) must be >= experts ({num_log})")
    phy2log = np.tile(np.arange(num_phy, dtype=np.int64), (n, 1))
    rank = np.zeros((n, num_phy), dtype=np.int64)
    logcnt = np.ones((n, num_log), dtype=np.int64)
    rows = np.arange(n)
    for i in range(num_log, num_phy):
        red = np.argmax((weight / logcnt).astype(np.float32), axis=-1)
        phy2log[:, i] = red
        rank[:, i] = logcnt[rows, red]
        logcnt[rows, red] += 1
    return phy2log, rank, logcnt


def _inverse(perm: np.ndarray) -> np.ndarray:
    inv = np.empty_like(perm)
    np.put_along_axis(inv, perm, np.broadcast_to(np.arange(perm.shape[1]), perm.shape), 1)
    return inv


def rebalance_experts_hierarchical(
    weight: np.ndarray,
    num_physical_experts: int,
    num_groups: int,
    num_nodes: int,
    num_gpus: int,
    argsort_desc: ArgsortDesc = stable_desc,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hierarchical policy; returns (phy2log, phyrank, logcnt)."""
    num_layers, num_log = weight.shape
    require(
        num_log % num_groups == 0,
        f"eplb experts ({num_log}) must be divisible by num_groups ({num_groups})",
    )
    require(
        num_groups % num_nodes == 0,
        f"eplb num_groups ({num_groups}) must be divisible by num_nodes ({num_nodes})",
    )
    require(
        num_gpus % num_nodes == 0,
        f"eplb num_gpus ({num_gpus}) must be divisible by num_nodes ({num_nodes})",
    )
    require(
        num_physical_experts % num_gpus == 0,
        f"eplb num_replicas ({num_physical_experts}) must be divisible by num_gpus ({num_gpus})",
    )
    group_size = num_log // num_groups
    groups_per_node = num_groups // num_nodes
    phy_per_gpu = num_physical_experts // num_gpus

    # Step 1: pack groups to nodes
    tokens_per_group = weight.reshape(num_layers, num_groups, group_size).sum(-1, dtype=np.float32)
    g_pack, g_rank = balanced_packing(tokens_per_group, num_nodes, argsort_desc)
    log2mlog = (
        ((g_pack * groups_per_node + g_rank) * group_size)[..., None] + np.arange(group_size)
    ).reshape(num_layers, -1)
    mlog2log = _inverse(log2mlog)

    # Step 2: construct redundant experts within nodes
    tokens_per_mlog = np.take_along_axis(weight, mlog2log, -1).reshape(-1, num_log // num_nodes)
    phy2mlog, phyrank, mlogcnt = replicate_experts(
        tokens_per_mlog, num_physical_experts // num_nodes
    )

    # Step 3: pack physical experts to GPUs
    tokens_per_phy = np.take_along_axis(
        (tokens_per_mlog / mlogcnt).astype(np.float32), phy2mlog, -1
    )
    pack_index, rank_in_pack = balanced_packing(tokens_per_phy, num_gpus // num_nodes, argsort_desc)
    phy2pphy = pack_index * phy_per_gpu + rank_in_pack
    pphy2phy = _inverse(phy2pphy)

    pphy2mlog = np.take_along_axis(phy2mlog, pphy2phy, -1)
    offsets = np.arange(0, num_log, num_log // num_nodes).reshape(1, -1, 1)
    pphy2mlog = (pphy2mlog.reshape(num_layers, num_nodes, -1) + offsets).reshape(num_layers, -1)
    pphy2log = np.take_along_axis(mlog2log, pphy2mlog, -1)
    pphyrank = np.take_along_axis(phyrank, pphy2phy, -1).reshape(num_layers, -1)
    logcnt = np.take_along_axis(mlogcnt.reshape(num_layers, -1), log2mlog, -1)
    return pphy2log, pphyrank, logcnt


def rebalance_experts(
    weight: np.ndarray,
    num_replicas: int,
    num_groups: int,
    num_nodes: int,
    num_gpus: int,
    argsort_desc: ArgsortDesc = stable_desc,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DeepSeek EPLB entry point.

    weight: [layers, num_logical_experts] load statistics. num_replicas: physical experts
    (multiple of num_gpus). num_groups: expert groups (hierarchical policy when divisible by
    num_nodes, else global). Returns phy2log [layers, num_replicas], log2phy
    [layers, num_logical_experts, max replicas] (-1 padded) and logcnt
    [layers, num_logical_experts]. ``argsort_desc``: the descending order used for packing
    (module docstring: the one place tie-breaking can differ from the reference).
    """
    weight = np.asarray(weight, dtype=np.float32)
    require(weight.ndim == 2, f"eplb weight (ndim {weight.ndim}) must be [layers, experts]")
    num_layers, num_log = weight.shape
    if num_groups % num_nodes == 0:
        phy2log, phyrank, logcnt = rebalance_experts_hierarchical(
            weight, num_replicas, num_groups, num_nodes, num_gpus, argsort_desc
        )
    else:
        phy2log, phyrank, logcnt = rebalance_experts_hierarchical(
            weight, num_replicas, 1, 1, num_gpus, argsort_desc
        )
    maxcnt = int(logcnt.max())
    log2phy = np.full((num_layers, num_log * maxcnt), -1, dtype=np.int64)
    np.put_along_axis(
        log2phy,
        phy2log * maxcnt + phyrank,
        np.broadcast_to(np.arange(num_replicas), (num_layers, num_replicas)),
        -1,
    )
    return phy2log, log2phy.reshape(num_layers, num_log, maxcnt), logcnt
