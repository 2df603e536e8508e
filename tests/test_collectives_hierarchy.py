"""Hierarchical (multi-node) collectives against a shard-level simulation and closed forms.

Oracles:
- a brute-force simulation of the two-level algorithm at shard granularity: every rank's
  shards (all_gather) or partial sums (reduce_scatter) are tracked step by step, the
  simulation checks that every rank ends with what the collective promises, and it counts
  the bytes each GPU receives in each step; the time is then each step's ring/mesh latency
  plus the busiest GPU's bytes over the step's per-GPU bandwidth. ``collective_time`` must
  equal it, on a switched fabric (H100, NVSwitch) and on a full mesh (910B, HCCS);
- the same buffer priced two ways: ``all_reduce(n) == reduce_scatter(n) + all_gather(n)``
  across nodes, for every preset, with and without measured intra-node fits;
- the order chosen (network step on ``1/g`` of the data) is never slower than the other
  order on any preset;
- one node is unchanged: the ring (switched) and one-round mesh closed forms.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.cost import cost_model_for
from moeplan.cost.collectives import (
    collective_time,
    intra_time,
    is_mesh,
    pair_bandwidth,
    ring_time,
)
from moeplan.specs import cluster_names, load_cluster

OPS = ("all_gather", "reduce_scatter")


def _all_gather_bytes(nodes: int, g: int, shard: float) -> tuple[float, float]:
    """Simulate inter-then-intra all_gather; (max bytes one GPU receives over the network,
    max bytes one GPU receives inside its node)."""
    have = {(i, j): {(i, j)} for i in range(nodes) for j in range(g)}
    inter = {r: 0.0 for r in have}
    for j in range(g):  # step 1: peers (., j) across nodes exchange everything they hold
        union = set().union(*(have[(i, j)] for i in range(nodes)))
        for i in range(nodes):
            inter[(i, j)] += len(union - have[(i, j)]) * shard
            have[(i, j)] = set(union)
    intra = {r: 0.0 for r in have}
    for i in range(nodes):  # step 2: ranks (i, .) of one node exchange everything they hold
        union = set().union(*(have[(i, j)] for j in range(g)))
        for j in range(g):
            intra[(i, j)] += len(union - have[(i, j)]) * shard
            have[(i, j)] = set(union)
    every = set(have)
    assert all(h == every for h in have.values())  # each GPU ends with all n shards
    return max(inter.values()), max(intra.values())


def _reduce_scatter_bytes(nodes: int, g: int, shard: float) -> tuple[float, float]:
    """Simulate intra-then-inter reduce_scatter of chunks owned by rank (i, j); a rank
    receives one partial sum per chunk it will own from every other member of the step
    (ring and direct RS alike). Returns (max network bytes, max intra-node bytes) per GPU."""
    ranks = [(i, j) for i in range(nodes) for j in range(g)]
    # part[r][chunk] = set of ranks whose contribution rank r holds summed for that chunk
    part = {r: {c: {r} for c in ranks} for r in ranks}
    intra = {r: 0.0 for r in ranks}
    for i in range(nodes):  # step 1: in node i, rank (i, j) keeps chunks of local rank j
        members = [(i, j) for j in range(g)]
        new = {}
        for j, r in enumerate(members):
            mine = [c for c in ranks if c[1] == j]
            new[r] = {c: set().union(*(part[m][c] for m in members)) for c in mine}
            intra[r] += (g - 1) * len(mine) * shard
        part.update(new)
    inter = {r: 0.0 for r in ranks}
    for j in range(g):  # step 2: peers (., j) reduce-scatter the chunks they kept
        members = [(i, j) for i in range(nodes)]
        part.update({r: {r: set().union(*(part[m][r] for m in members))} for r in members})
        for r in members:
            inter[r] += (nodes - 1) * shard
    assert all(part[r] == {r: set(ranks)} for r in ranks)  # own chunk, summed over all n
    return max(inter.values()), max(intra.values())


def _intra_bw(cluster, g: int) -> float:
    """Per-GPU bandwidth of a g-rank intra-node step: (g-1) pair links on a mesh."""
    return (g - 1) * pair_bandwidth(cluster) if is_mesh(cluster.intra) else cluster.intra.bw


def _intra_latency(cluster, g: int) -> float:
    """One round on a mesh; g-1 ring steps on a switched fabric."""
    return cluster.intra.latency * (1 if is_mesh(cluster.intra) else g - 1)


@pytest.mark.parametrize(
    ("name", "nodes"), [("h100-sxm-8", 2), ("h100-sxm-8", 4), ("mixserve-910b", 4)]
)
@pytest.mark.parametrize("g", [2, 4, 8])
@pytest.mark.parametrize("op", OPS)
def test_time_equals_the_shard_simulation(name, nodes, g, op):
    cl = load_cluster(name, nodes)
    nbytes = 256e6
    n = g * nodes
    sim = _all_gather_bytes if op == "all_gather" else _reduce_scatter_bytes
    net, local = sim(nodes, g, nbytes / n)
    want = (
        (nodes - 1) * cl.inter.latency
        + net / cl.inter.bw
        + _intra_latency(cl, g)
        + local / _intra_bw(cl, g)
    )
    assert collective_time(op, nbytes, n, nodes, cl) == pytest.approx(want, rel=1e-12)
    # what each GPU must receive inside its node is the full output's (g-1)/g, not 1/nodes
    assert local == pytest.approx((g - 1) / g * nbytes, rel=1e-12)


def _multi_node_presets():
    """Every preset on 2 and 4 NVLink domains: nodes, or racks of a rack cluster."""
    for name in cluster_names():
        rack = load_cluster(name).mnnvl
        for n in (2, 4):
            yield load_cluster(name, racks=n) if rack else load_cluster(name, n)


@pytest.mark.parametrize("nbytes", [4e3, 1e6, 64e6, 4e9])
def test_all_reduce_is_reduce_scatter_plus_all_gather_on_every_preset(nbytes):
    """Same buffer two ways: the α-β formulas and the cost model with each preset's profile
    (measured intra-node fits where it has them). Exact: the inter ring AR is its RS + AG."""
    for cl in _multi_node_presets():
        cm = cost_model_for(cl)
        for g in range(2, cl.nvlink_domain + 1):
            for nodes in range(2, cl.num_domains + 1):
                n = g * nodes
                ar = collective_time("all_reduce", nbytes, n, nodes, cl)
                rs_ag = sum(collective_time(op, nbytes, n, nodes, cl) for op in OPS)
                assert rs_ag == pytest.approx(ar, rel=1e-12), (cl.name, g, nodes)
                ar = cm.collective("all_reduce", nbytes, n, nodes)
                rs_ag = sum(cm.collective(op, nbytes, n, nodes) for op in OPS)
                assert rs_ag == pytest.approx(ar, rel=1e-12), (cl.name, cm.profile_name, g)


def test_the_defect_rs_plus_ag_was_cheaper_than_all_reduce():
    """The old intra step on nbytes/nodes: RS + AG at 1.44x below the AR on 2 x H100."""
    cl = load_cluster("h100-sxm-8", 2)
    nbytes, g, nodes = 1e10, 8, 2
    old = sum(
        intra_time(op, nbytes / nodes, g, cl) + ring_time(op, nbytes / g, nodes, cl.inter)
        for op in OPS
    )
    ar = collective_time("all_reduce", nbytes, 16, nodes, cl)
    assert ar / old == pytest.approx(1.436, rel=1e-3)
    assert sum(collective_time(op, nbytes, 16, nodes, cl) for op in OPS) == pytest.approx(ar)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("nbytes", [1e5, 1e8, 1e10])
def test_network_step_on_a_1_over_g_share_is_the_cheaper_order_on_every_preset(op, nbytes):
    """The other two-level order (intra on nbytes/nodes, then (nodes-1)/nodes of nbytes per
    GPU over the network) is never faster: every preset's NIC is no faster than its fabric."""
    for cl in _multi_node_presets():
        nodes = cl.num_domains
        for g in range(2, cl.nvlink_domain + 1):
            other = intra_time(op, nbytes / nodes, g, cl) + ring_time(op, nbytes, nodes, cl.inter)
            assert collective_time(op, nbytes, g * nodes, nodes, cl) <= other * (1 + 1e-12)


@settings(max_examples=examples(80))
@given(
    name=st.sampled_from(["h100-sxm-8", "a100-sxm-8", "findep-a", "l40s-8", "mixserve-910b"]),
    op=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]),
    n=st.integers(2, 8),
    nbytes=st.floats(1e3, 1e10),
)
def test_one_node_is_the_ring_or_one_round_mesh_closed_form(name, op, n, nbytes):
    cl = load_cluster(name)
    if n > cl.gpus_per_node:
        return
    rounds = 2 if op == "all_reduce" else 1
    link = cl.intra
    if is_mesh(link):  # every rank sends nbytes/n over each of its n-1 pair links at once
        want = rounds * (link.latency + nbytes / n / pair_bandwidth(cl))
    else:
        want = rounds * ((n - 1) * link.latency + (n - 1) / n * nbytes / link.bw)
    assert collective_time(op, nbytes, n, 1, cl) == pytest.approx(want, rel=1e-12)
