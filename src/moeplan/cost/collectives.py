"""Collective communication times: ring/pairwise and full-mesh α-β formulas, two-level hierarchy.

Message-size convention (nccl-tests): ``nbytes`` is the per-rank buffer — all_reduce: the
buffer reduced; all_gather: the *output* (n shards); reduce_scatter: the *input* (n shards);
all_to_all: the bytes one rank sends in total (including its own shard).

Switched fabrics (NVSwitch, PCIe, the network). A group of ``n`` ranks on one link level with
latency ``a`` and per-direction bandwidth ``B`` (bytes/s per GPU, DESIGN.md):

- ring all_reduce: ``2(n-1) a + 2 (n-1)/n * nbytes / B``
- ring all_gather / reduce_scatter: ``(n-1) a + (n-1)/n * nbytes / B``
- pairwise all_to_all: ``(n-1) a + (n-1)/n * nbytes / B``
- P2P: ``a + nbytes / B``

Full-mesh fabrics (:data:`MESH_KINDS`: HCCS on Ascend 910B). A node of ``G`` GPUs wires a
dedicated link to every peer, so the spec's per-GPU bandwidth ``B`` is ``G-1`` pair links of
``B/(G-1)`` each (:func:`pair_bandwidth`). A group of ``n <= G`` ranks reaches its ``n-1``
peers over ``n-1`` of those links *at once* and can use no others, so the bandwidth a rank has
for that collective is ``(n-1) * B/(G-1)``, not ``B``: a 2-rank group gets 1/7 of it on an
8-NPU node (the previous model priced small HCCS groups up to 7x too cheap). Every rank sends
``nbytes/n`` over each of its links in one round (MixServe §III-B2, Table I: RS/AG "1 round"
over "dedicated links between each pair of NPUs", §II-B), so with ``P = B/(G-1)``:

- mesh all_gather / reduce_scatter / all_to_all: ``a + nbytes / (n P)``
  (= ``(n-1)/n * nbytes / ((n-1) P)``: the ring's volume at ``(n-1) P`` per rank)
- mesh all_reduce (RS then AG): ``2 a + 2 nbytes / (n P)``

Departure: the paper prices A2A as ``d-1`` pairwise rounds (Table I); on the mesh those
rounds use disjoint links and run at once, so one round's latency is charged — the strategy
planner reads the mesh the same way (``planners/strategy/comm.py``), so both agree.

Why 910B HCCS is a per-pair-link figure (decided from sources, recorded in
the ``hccs`` preset's ``source``): MixServe §IV-A says the Atlas 800T A2 node is
"fully-connected via HCCS (up to 480 Gbps)" and §II-B attributes the low intra-node cost to
"dedicated communication links, established between each pair of NPUs" and calls RoCE
(200 Gb/s per NPU) "several times lower than that of HCCS" — true of 7 x 30 GB/s = 210 GB/s
per NPU (8.4x), false of 30 GB/s per NPU (1.2x). Public 910B figures agree: 56 GB/s per
NPU-to-NPU link, 392 GB/s per NPU over its 7 links (arthurchiao.art "GPU Performance (Data
Sheets) Quick Reference", 2023: "one-to-one max bandwidth" vs "one-to-many total bw"); 480 Gb/s
= 60 GB/s is that pair link (bidirectional). So the preset keeps 210 GB/s per NPU per direction
and this module splits it per pair link. Held-out check (``tests/test_collectives_mesh.py``):
measured 910B all_gather bandwidth for 2/4/8 NPUs is 38/64/149 GB/s (gameofdimension/limulidae,
HCCL via torch_npu) — growing with the group as the mesh predicts (2:4:8), where a per-NPU
figure shared by all peers would make it fall; the links run at ~62 % of 30 GB/s there.

Groups spanning ``nodes > 1`` nodes (``g = n / nodes`` ranks per node, rank ``(i, j)`` =
local rank ``j`` of node ``i``) are hierarchical, the network step among the ``nodes`` peers
of one local rank (all ``g`` of them at once, each on its own NIC). Per-GPU bytes of each
step, with ``s = nbytes / n`` one rank's shard:

- all_gather (output ``nbytes``): (1) inter all_gather among ``(·, j)``: each holds
  ``nodes * s = nbytes / g`` after it, moving ``(nodes-1)/nodes * nbytes/g`` per GPU over the
  network; (2) intra all_gather among ``(i, ·)`` of those ``nbytes/g`` pieces: every GPU
  ends with all ``nbytes``, so it receives ``(g-1)/g * nbytes`` over the node's fabric — the
  intra step's *output* is the full ``nbytes``, not ``nbytes / nodes``.
- reduce_scatter (input ``nbytes``) is its mirror: intra reduce_scatter of ``nbytes``
  (``(g-1)/g * nbytes`` per GPU; each keeps ``nbytes/g`` of partial sums), then inter
  reduce_scatter of ``nbytes/g`` among ``(·, j)``.
- all_reduce = intra reduce_scatter + inter all_reduce of ``nbytes / g`` + intra all_gather.
  Since a ring all_reduce is exactly its reduce_scatter plus all_gather (latency included),
  ``all_reduce(n) == reduce_scatter(n) + all_gather(n)`` across nodes as inside one node.

This order (network step on ``1/g`` of the data) is the cheaper one whenever a GPU's
network bandwidth is at most its intra-node bandwidth (every preset); the other order
(intra first on ``nbytes / nodes``, then ``(nodes-1)/nodes * nbytes`` per GPU over the
network) costs more. Formerly the all_gather / reduce_scatter priced the intra step of
one order and the inter step of the other (intra on ``nbytes / nodes``): RS + AG came out
below the all_reduce of the same buffer — by up to 1.44x on 2 x H100 nodes, 1.65x on
4 x 910B, 2.4x on 8 x findep-a — which no algorithm achieves
(``tests/test_collectives_hierarchy.py``).

all_to_all sends ``(n-g)/n`` of its bytes over the network and ``(g-1)/n`` over the intra
link at the same time, so it takes the longer of the two plus both latencies. The intra
parts use the mesh formulas on a mesh fabric.

When a :class:`HardwareProfile` has a measured fit for ``(op, n)`` inside one node, that fit
replaces the intra-node formula.

"Node" above is the NVLink domain (:attr:`moeplan.specs.ClusterSpec.nvlink_domain`): the
machine on an HGX / DGX server, the whole rack of 72 GPUs on GB200 / GB300 NVL72, whose trays
of 4 reach each other over the NVLink switches. A group of 16 ranks is one domain on NVL72
(priced at NVLink bandwidth) and two on 8-GPU B200 nodes (the network step at the NIC's).
"""

from __future__ import annotations

from collections.abc import Callable

from moeplan.specs import ClusterSpec, LinkSpec

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")

#: intra-node link kinds that are full meshes: one dedicated link per GPU pair (HCCS)
MESH_KINDS = ("hccs", "full-mesh")

IntraFit = Callable[[str, int, float], float | None]


def _check_op(op: str) -> None:
    if op not in COLLECTIVE_OPS:
        raise ValueError(f"unknown collective op {op!r}; expected one of {COLLECTIVE_OPS}")


def ring_time(op: str, nbytes: float, n: int, link: LinkSpec) -> float:
    """One-level ring/pairwise formula on a switched fabric (see module docstring)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    _check_op(op)
    frac = (n - 1) / n
    rounds = 2 if op == "all_reduce" else 1
    return rounds * ((n - 1) * link.latency + frac * nbytes / link.bw)


def is_mesh(link: LinkSpec) -> bool:
    """Whether ``link`` is a full mesh with a dedicated link per GPU pair."""
    return link.kind in MESH_KINDS


def pair_bandwidth(cluster: ClusterSpec) -> float:
    """Bytes/s per direction of one GPU-pair link inside an NVLink domain (the whole per-GPU
    bandwidth on a switched fabric, ``bw / (nvlink_domain - 1)`` on a full mesh)."""
    intra = cluster.intra
    return intra.bw / max(1, cluster.nvlink_domain - 1) if is_mesh(intra) else intra.bw


def mesh_time(op: str, nbytes: float, n: int, link: LinkSpec, pair_links: int) -> float:
    """Full-mesh formula for ``n`` ranks whose GPU has ``pair_links`` links of
    ``link.bw / pair_links`` each (module docstring); ``n - 1 <= pair_links`` in one node."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    _check_op(op)
    links = max(1, min(n - 1, pair_links))
    per_rank_bw = links * link.bw / max(1, pair_links)
    rounds = 2 if op == "all_reduce" else 1
    return rounds * (link.latency + (n - 1) / n * nbytes / per_rank_bw)


def intra_time(op: str, nbytes: float, n: int, cluster: ClusterSpec) -> float:
    """One node's formula for ``n`` ranks: mesh or ring by the intra link's kind."""
    if is_mesh(cluster.intra):
        return mesh_time(op, nbytes, n, cluster.intra, cluster.nvlink_domain - 1)
    return ring_time(op, nbytes, n, cluster.intra)


def collective_time(
    op: str,
    nbytes: float,
    n: int,
    nodes: int,
    cluster: ClusterSpec,
    intra_fit: IntraFit | None = None,
) -> float:
    """Seconds for collective ``op`` over ``n`` ranks spread over ``nodes`` NVLink domains."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    _check_op(op)
    nodes = max(1, min(nodes, n))

    def intra(o: str, b: float, m: int) -> float:
        if m <= 1 or b <= 0:
            return 0.0
        if intra_fit is not None:
            t = intra_fit(o, m, b)
            if t is not None:
                return t
        return intra_time(o, b, m, cluster)

    if nodes == 1:
        return intra(op, nbytes, n)
    g = max(1, n // nodes)
    inter = cluster.inter
    if op == "all_reduce":
        return (
            intra("reduce_scatter", nbytes, g)
            + ring_time("all_reduce", nbytes / g, nodes, inter)
            + intra("all_gather", nbytes, g)
        )
    if op in ("all_gather", "reduce_scatter"):
        # network step among same-local-rank peers on nbytes/g; intra step on all nbytes
        return intra(op, nbytes, g) + ring_time(op, nbytes / g, nodes, inter)
    t_inter = (nodes - 1) * inter.latency + (n - g) / n * nbytes / inter.bw
    t_intra = intra("all_to_all", nbytes * g / n, g) if g > 1 else 0.0
    return max(t_inter, t_intra) + inter.latency
