"""Every preset link's bandwidth equals what its ``source`` text states.

Each row names the figure the source quotes, how it converts to the preset convention
(bytes/s per GPU per direction, clusters.json ``_note``) and the expected number; the test
checks the figure really is in the source text and the preset equals the conversion, so a
number and its source cannot drift apart silently.
"""

from __future__ import annotations

import pytest

from moeplan.cost.collectives import is_mesh, pair_bandwidth
from moeplan.specs import load_cluster
from moeplan.specs.presets import cluster_table

GB = 1e9
# link: (figure quoted in its source, per-GPU per-direction bytes/s that figure implies)
EXPECTED = {
    "nvlink-pair-a6000": ("~25 GB/s per direction", 25 * GB),  # PCIe hop dominates
    "pcie4": ("~25 GB/s achievable", 25 * GB),
    "nvlink-h20": ("900 GB/s bidirectional", 900 * GB / 2),
    "nvlink3": ("600 GB/s bidirectional", 600 * GB / 2),
    "nvlink4": ("450 GB/s per direction", 450 * GB),
    "nvlink-h800": ("H800 NVLink 400 GB/s bidirectional", 400 * GB / 2),
    "nvlink5": ("1.8 TB/s bidirectional per GPU", 1800 * GB / 2),
    "nvlink-semmoe": ("900 GB/s premium bandwidth (bidirectional)", 900 * GB / 2),
    # MixServe §IV-A's 480 Gb/s is one NPU-pair link (60 GB/s bidirectional); 7 pair links
    # per NPU in the 8-NPU full mesh (cost.collectives docstring: why per pair, not per NPU)
    "hccs": ("fully-connected via HCCS (up to 480 Gbps)", 480 / 8 * GB / 2 * 7),
    "ib-100g-node": ("100 Gb/s InfiniBand per node", 100 / 8 * GB / 8),
    "ib-8x200g": ("8 x 200 Gb/s InfiniBand per node", 200 / 8 * GB),
    "ib-400g-node": ("400 Gb/s InfiniBand per node", 400 / 8 * GB / 8),
    "ib-h20-findep": ("one 400 Gb/s NIC per node", 400 / 8 * GB / 8),
    "roce-200g": ("200 Gb/s RoCE per NPU", 200 / 8 * GB),
    "cx7-ndr": ("50 GB/s per GPU", 50 * GB),
    "cx6-hdr": ("25 GB/s per GPU", 25 * GB),
    "nvlink5-nvl72": ("900 GB/s per GPU per direction", 900 * GB),
    "ib-xdr-rack": ("inter_rack_bw 100 GB/s per GPU per direction", 100 * GB),
    "cx8-xdr": ("800 Gb/s per GPU", 800 / 8 * GB),
}


def test_every_preset_link_is_checked():
    """A link added to clusters.json without a row here would escape the source check."""
    assert set(cluster_table()["links"]) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_link_bandwidth_matches_its_source(name):
    link = cluster_table()["links"][name]
    figure, want = EXPECTED[name]
    assert figure in link["source"], (name, link["source"])
    assert link["bw"] == pytest.approx(want, rel=1e-9), name


def test_hccs_pair_link_is_a_seventh_of_the_npu_bandwidth():
    """The full-mesh reading: one NPU-pair link = per-NPU bandwidth / 7 = MixServe's 480 Gb/s
    bidirectional; RoCE is 200 Gb/s per NPU ("several times lower than that of HCCS")."""
    cl = load_cluster("mixserve-910b")
    assert is_mesh(cl.intra) and not is_mesh(cl.inter)
    assert pair_bandwidth(cl) == pytest.approx(480 / 8 * GB / 2, rel=1e-12)
    assert cl.inter.bw == pytest.approx(200 / 8 * GB, rel=1e-12)
    assert cl.intra.bw / cl.inter.bw > 3  # the paper's "several times lower"
