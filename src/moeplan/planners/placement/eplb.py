"""DeepSeek EPLB (expert-parallelism load balancer) in numpy.

Reimplements ``rebalance_experts`` of deepseek-ai/EPLB (``eplb.py``) with the same semantics
and tie-breaking, so it reproduces the published example and vLLM's cases exactly
(``tests/data/eplb_reference_vectors.json``) and, on integer loads with ties, the reference's
``phy2log``, ``log2phy`` (replica order) and ``logcnt`` element for element. Used by Sem-MoE
(paper 002, §4.3) as a load-balancing baseline.

Two policies, as in the original:
- hierarchical (``num_groups % num_nodes == 0``): pack expert groups to nodes, replicate the
  heaviest experts within each node, pack physical experts to the node's GPUs;
- global (otherwise): the same with one group and one node.

Tie-breaking, point by point (the previous stable order differed from the reference
on 38 of 55 random integer inputs):
- ``balanced_packing`` visits items in ``weight.float().sort(-1, descending=True)`` order.
  ``torch.sort`` is not stable: on CPU (the reference moves ``weight`` to the CPU) it runs
  libstdc++'s ``std::sort`` — introsort: median-of-three pivot (``first+1, mid, last-1``),
  Hoare partition, heapsort past ``2*floor(log2 n)`` levels, insertion sort for runs of
  :data:`STD_SORT_THRESHOLD` — on (key, index) pairs compared by key only (NaN first).
  :func:`torch_sort_desc` replays that algorithm, so equal weights land in the same order
  (verified against torch 2.13's CPU sort, which this ordering matches for every capability
  DEFAULT/AVX2/AVX512, including the heapsort fallback; ``tests/test_eplb_reference.py``).
- The lightest pack with room is Python's ``min`` over packs, first on ties; pack weights
  accumulate in float32 in visiting order, as the reference's 0-d float32 tensors do.
- ``replicate_experts`` takes ``(weight / logcnt).max(-1).indices``: the first maximum
  (``np.argmax``), with the division in float32.

Where exact equality can still fail, and why: (1) step 1 sums each group's weights; torch's float32 reduction order is not numpy's,
so when a group's partial sums are not exact in float32 (non-integer weights, or integer sums
above 2**24) two groups' totals can differ in the last bit and two near-equal groups can swap
(hierarchical policy with ``num_groups < num_experts`` only);
(2) a torch build whose CPU sort dispatches to x86-simd-sort (``USE_X86_SIMD_SORT``: its
AVX2/AVX512 key-value quicksort orders ties its own way, see ATen's ``SortingKernel.cpp``)
or a future libstdc++ with another introsort would order ties differently; pass its order as
``argsort_desc`` to reproduce it. :func:`stable_desc` is the machine-independent alternative
(ties by ascending index); under any tie order every node's load is the same, and in the
global policy every GPU's load and the replica count per weight too (tested).

Departure: bad arguments raise :class:`moeplan.errors.MoeplanError` (a ValueError) naming the
field instead of ``AssertionError``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from moeplan.errors import require

ArgsortDesc = Callable[[np.ndarray], np.ndarray]

#: libstdc++ ``_S_threshold``: introsort leaves runs this short to the final insertion sort
STD_SORT_THRESHOLD = 16


def stable_desc(w: np.ndarray) -> np.ndarray:
    """Indices by descending weight per row; ties by ascending index."""
    return np.argsort(-w, axis=-1, kind="stable")


def torch_sort_desc(w: np.ndarray) -> np.ndarray:
    """Per row, the indices ``torch.sort(w, -1, descending=True)`` returns on CPU (libstdc++
    ``std::sort`` with a key-only comparator; module docstring)."""
    w = np.asarray(w)
    rows = w.reshape(-1, w.shape[-1]) if w.size else w.reshape(0, w.shape[-1])
    out = np.empty(rows.shape, dtype=np.int64)
    for r, row in enumerate(rows):
        # integer ranks keep exactly the comparisons torch makes: NaN above everything (and
        # NaNs tied), -0.0 tied with 0.0
        key = np.unique(row, return_inverse=True)[1].reshape(-1).tolist()
        out[r] = _std_sort_greater(key)
    return out.reshape(w.shape)


def _std_sort_greater(key: list[int]) -> list[int]:
    """Positions 0..n-1 as libstdc++ ``std::sort`` leaves them under ``key[x] > key[y]``."""
    a = list(range(len(key)))
    n = len(a)
    if n > 1:
        _introsort_loop(a, key, 0, n, 2 * (n.bit_length() - 1))
        head = min(n, STD_SORT_THRESHOLD)
        for i in range(1, head):  # __insertion_sort(first, first + 16)
            v = a[i]
            if key[v] > key[a[0]]:
                a[1 : i + 1] = a[0:i]
                a[0] = v
            else:
                _linear_insert(a, key, i)
        for i in range(head, n):  # __unguarded_insertion_sort
            _linear_insert(a, key, i)
    return a


def _linear_insert(a: list[int], key: list[int], pos: int) -> None:
    v, j = a[pos], pos - 1
    kv = key[v]
    while kv > key[a[j]]:
        a[j + 1] = a[j]
        j -= 1
    a[j + 1] = v


def _introsort_loop(a: list[int], key: list[int], first: int, last: int, depth: int) -> None:
    while last - first > STD_SORT_THRESHOLD:
        if depth == 0:
            _heap_sort(a, key, first, last)
            return
        depth -= 1
        # __move_median_to_first(first, first + 1, mid, last - 1)
        p, q, r = first + 1, first + (last - first) // 2, last - 1
        kp, kq, kr = key[a[p]], key[a[q]], key[a[r]]
        if kp > kq:
            m = q if kq > kr else (r if kp > kr else p)
        else:
            m = p if kp > kr else (r if kq > kr else q)
        a[first], a[m] = a[m], a[first]
        # __unguarded_partition(first + 1, last, pivot = first)
        pk, lo, hi = key[a[first]], first + 1, last
        while True:
            while key[a[lo]] > pk:
                lo += 1
            hi -= 1
            while pk > key[a[hi]]:
                hi -= 1
            if lo >= hi:
                break
            a[lo], a[hi] = a[hi], a[lo]
            lo += 1
        _introsort_loop(a, key, lo, last, depth)
        last = lo


def _heap_sort(a: list[int], key: list[int], first: int, last: int) -> None:
    """``std::__partial_sort(first, last, last)``: make_heap, then sort_heap."""
    length = last - first
    for parent in range((length - 2) // 2, -1, -1):
        _adjust_heap(a, key, first, parent, length, a[first + parent])
    while last - first > 1:
        last -= 1
        v = a[last]
        a[last] = a[first]
        _adjust_heap(a, key, first, 0, last - first, v)


def _adjust_heap(a: list[int], key: list[int], first: int, hole: int, length: int, v: int) -> None:
    top = child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if key[a[first + child]] > key[a[first + child - 1]]:
            child -= 1
        a[first + hole] = a[first + child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        a[first + hole] = a[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2  # __push_heap
    while hole > top and key[a[first + parent]] > key[v]:
        a[first + hole] = a[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    a[first + hole] = v


def balanced_packing(
    weight: np.ndarray, num_packs: int, argsort_desc: ArgsortDesc = torch_sort_desc
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
        red = np.argmax(weight / logcnt.astype(np.float32), axis=-1)  # first max
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
    argsort_desc: ArgsortDesc = torch_sort_desc,
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
    tokens_per_phy = np.take_along_axis(tokens_per_mlog / mlogcnt.astype(np.float32), phy2mlog, -1)
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
    argsort_desc: ArgsortDesc = torch_sort_desc,
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
