"""Clusters whose NVLink domain is not the node (GB200 / GB300 NVL72: trays of 4 GPUs, 72 in
one NVLink domain, InfiniBand between racks) against HGX nodes of 8 (B200 / B300): closed
forms of the collectives, the NVLink-or-network decision of every price, rack counts and the
bad inputs (one line, exit 2)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest

from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.serve.deployment import PDLayout
from moeplan.serve.pools.pd import transfer_inter_node
from moeplan.specs import LinkSpec, load_cluster, load_model

NVL = 900e9  # NVLink 5: 900 GB/s per GPU per direction (gb200/system.yaml, DGX B200)
NVL_LAT = 1e-5  # p2p_latency 10 us (gb200/system.yaml)
CX7, CX7_LAT = 50e9, 5e-6  # DGX B200: ConnectX-7 400 Gb/s per GPU


@pytest.mark.parametrize("nbytes", [1e5, 64e6])
def test_16_ranks_on_nvl72_are_priced_at_nvlink_and_on_two_b200_nodes_at_the_network(nbytes):
    """All-gather and all-to-all among 16 ranks, closed form (nccl-tests bytes, roofline
    model: no fitted profile). NVL72: one ring over NVLink. Two DGX B200 nodes: NVLink inside
    each node of 8, then the network step among the 2 nodes at the NIC's 50 GB/s."""
    rack = load_cluster("gb200-nvl72")
    hgx = load_cluster("b200-sxm-8", 2)
    assert (rack.domains_spanned(16), hgx.domains_spanned(16)) == (1, 2)
    on_rack = cost_model_for(rack, "roofline")
    on_hgx = cost_model_for(hgx, "roofline")

    ag_rack = 15 * NVL_LAT + 15 / 16 * nbytes / NVL
    assert on_rack.collective("all_gather", nbytes, 16, 1) == pytest.approx(ag_rack, rel=1e-12)
    ag_hgx = (7 * NVL_LAT + 7 / 8 * nbytes / NVL) + (CX7_LAT + 1 / 2 * (nbytes / 8) / CX7)
    assert on_hgx.collective("all_gather", nbytes, 16, 2) == pytest.approx(ag_hgx, rel=1e-12)

    a2a_rack = 15 * NVL_LAT + 15 / 16 * nbytes / NVL
    assert on_rack.collective("all_to_all", nbytes, 16, 1) == pytest.approx(a2a_rack, rel=1e-12)
    net = CX7_LAT + 8 / 16 * nbytes / CX7
    fabric = 7 * NVL_LAT + 7 / 8 * (nbytes * 8 / 16) / NVL
    a2a_hgx = max(net, fabric) + CX7_LAT
    assert on_hgx.collective("all_to_all", nbytes, 16, 2) == pytest.approx(a2a_hgx, rel=1e-12)


def test_inside_one_rack_no_price_reads_the_network():
    """Halving the between-racks link changes no price of a group inside one rack, and does
    change it once the group spans two racks."""
    rack = load_cluster("gb200-nvl72", racks=2)
    slow = replace(rack, inter=LinkSpec(kind="ib", bw=rack.inter.bw / 2, latency=5e-6))
    a, b = cost_model_for(rack, "roofline"), cost_model_for(slow, "roofline")
    for n in (8, 16, 48, 72):
        d = rack.domains_spanned(n)
        assert d == 1
        for op in ("all_reduce", "all_gather", "all_to_all"):
            assert a.collective(op, 1e7, n, d) == b.collective(op, 1e7, n, d), (op, n)
    assert rack.domains_spanned(144) == 2
    assert a.collective("all_to_all", 1e9, 144, 2) < b.collective("all_to_all", 1e9, 144, 2)


def test_wide_ep_past_8_ranks_runs_over_nvlink_on_the_rack_and_the_network_on_b200():
    """DeepEP dispatch / combine of DeepSeek-V3 at EP48 (+32 redundant experts, as SGLang
    deploys it on GB200 NVL72): inside the NVL72 domain no byte
    crosses the network (its price ignores the between-racks link); with the same GPUs in
    NVLink domains of one tray of 4 it does, and costs more."""
    from moeplan.kernel_tables import engine_cost_model

    dsv3 = load_model("deepseek-v3")
    rack = load_cluster("gb200-nvl72")
    trays = replace(rack, domain_gpus=None)  # the same trays, NVLink only inside each
    slow = replace(rack, inter=LinkSpec(kind="ib", bw=rack.inter.bw / 4, latency=5e-6))
    prices = {}
    for name, c in (("rack", rack), ("trays", trays), ("slow", slow)):
        w = engine_cost_model(c, engine="sglang").wide_ep
        prices[name] = w.moe(dsv3, 128, 48, redundant=32, phase="generation")
    assert prices["rack"].dispatch == prices["slow"].dispatch
    assert prices["rack"].combine == prices["slow"].combine
    assert prices["trays"].dispatch > prices["rack"].dispatch
    assert prices["trays"].combine > prices["rack"].combine


def test_kv_transfer_of_pd_inside_a_rack_is_nvlink():
    """A P/D deployment of 56 GPUs (2 prefill instances of 4, one decode instance of 48)
    moves its KV over NVLink on NVL72 and over the network on DGX B200 nodes."""
    pd = PDLayout(
        prefill=Layout(attn_tp=4, attn_dp=1, moe_tp=1, moe_ep=4),
        decode=Layout(attn_tp=1, attn_dp=48, moe_tp=1, moe_ep=48),
        x=2,
        y=1,
    )
    assert pd.gpus == 56
    assert not transfer_inter_node(load_cluster("gb200-nvl72"), pd)
    assert transfer_inter_node(load_cluster("b200-sxm-8", 7), pd)


@pytest.mark.parametrize("name", ["gb200-nvl72", "gb300-nvl72"])
@pytest.mark.parametrize("racks", [1, 2, 5])
def test_racks_count_72_gpus_each_in_trays_of_4(name, racks):
    c = load_cluster(name, racks=racks)
    assert (c.num_gpus, c.num_nodes, c.gpus_per_node) == (72 * racks, 18 * racks, 4)
    assert (c.nvlink_domain, c.num_domains, c.mnnvl) == (72, racks, True)


def test_hgx_nodes_are_their_own_nvlink_domain():
    for name in ("b200-sxm-8", "b300-sxm-8", "h100-sxm-8"):
        c = load_cluster(name, 9)
        assert (c.nvlink_domain, c.num_domains, c.mnnvl) == (8, 9, False)


def test_a_domain_that_is_not_whole_nodes_is_refused():
    c = load_cluster("gb200-nvl72")
    with pytest.raises(MoeplanError, match="whole number of nodes"):
        replace(c, domain_gpus=70)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moeplan", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--cluster", "h100-sxm-8", "--racks", "2"), ("racks (2)", "h100-sxm-8")),
        (("--cluster", "gb200-nvl72", "--nodes", "9"), ("36 GPUs", "NVLink domains of 72")),
        (("--cluster", "b200-8"), ("'b200-8'", "b200-sxm-8")),
        (("--cluster", "gb200-nvl72", "--racks", "1", "--nodes", "18"), ("racks (1)", "nodes")),
    ],
)
def test_bad_topology_is_one_line_exit_2(args, needles, tmp_path):
    p = _cli("plan", "--model", "deepseek-v3", *args, "--out", str(tmp_path / "o"))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and p.stdout == "", p.stderr
    assert all(n in lines[0] for n in needles), lines[0]
    assert not (tmp_path / "o").exists()


def _fake_served(entry):
    metrics = SimpleNamespace(output_tokens_per_s_per_gpu=100.0)
    return SimpleNamespace(
        entry=entry, metrics=metrics, result=SimpleNamespace(knobs=None, engine=None, setup=None)
    )


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_launch_folders_on_nvl72_use_trays_of_4_and_the_mnnvl_environment(engine):
    """P/D 2 x prefill EP4 : 1 x decode EP64 of DeepSeek-V3 on one GB200 NVL72 rack: each
    prefill server on one tray of 4 GPUs, the decode server on 16 trays (4 GPUs each), and
    only the server spanning trays exports NCCL's multi-node NVLink switches. On DGX B200
    nodes of 8 the same decode server spans 8 nodes over the network: no MNNVL environment."""
    from moeplan.export import constraints as cons
    from moeplan.export.plan_export import ExportContext, engine_export, serving_options
    from moeplan.search.ranking.entries import Entry

    m = load_model("deepseek-v3")
    pd = PDLayout(
        prefill=Layout(attn_dp=4, moe_ep=4), decode=Layout(attn_dp=64, moe_ep=64), x=2, y=1
    )
    (opt,) = serving_options(
        SimpleNamespace(ranked=[_fake_served(Entry(family="pd", label="pd", layout=pd, plan=None))])
    )
    for c, span, mnnvl in (
        (load_cluster("gb200-nvl72"), 16, True),
        (load_cluster("b200-sxm-8", 9), 8, False),
    ):
        ctx = ExportContext(
            model_path="org/d", target=cons.Target.of(m, c), planned_layers=61, full_layers=61
        )
        ex = engine_export(engine, SimpleNamespace(model=m, cluster=c), ctx, [opt])
        servers = {
            (s["role"], len(s["nodes"]), len(s["gpus_per_node"])) for s in ex.deployment["servers"]
        }
        gpn = c.gpus_per_node
        assert servers == {("prefill", 1, 4), ("decode", span, gpn)}, servers
        lines = ex.text.splitlines()
        decode = [x for x in lines if "start decode-0" in x]
        prefill = [x for x in lines if "start prefill-" in x]
        assert decode and prefill
        assert all(
            ("NCCL_MNNVL_ENABLE=1" in x and "NCCL_CUMEM_ENABLE=1" in x) == mnnvl for x in decode
        )
        assert not any("NCCL_MNNVL_ENABLE" in x for x in prefill)


def test_the_plan_says_which_link_the_winners_all_to_all_runs_on():
    """The plan's topology sentence: EP48 on NVL72 runs over NVLink and would cross the
    network in HGX domains of 8, where it takes longer (DeepEP's priced kernels); EP72 on 9
    DGX B200 nodes crosses the network and would be shorter in one NVLink domain; a single
    node has no other topology to compare with."""
    from moeplan.kernel_tables import engine_cost_model
    from moeplan.search.ranking.topology import exchange_s, topology_sentence

    m = load_model("deepseek-v3")
    rack = engine_cost_model(load_cluster("gb200-nvl72"), engine="sglang")
    s = topology_sentence(rack, m, 48)
    assert s is not None and "runs over NVLink" in s and "would run over the network" in s
    assert "longer there" in s
    hgx = engine_cost_model(load_cluster("b200-sxm-8", 9), engine="sglang")
    s = topology_sentence(hgx, m, 72)
    assert s is not None and "runs over the network" in s and "shorter there" in s
    # B200's winner inside the node: the sentence prices the next wider group on both sides
    s = topology_sentence(hgx, m, 8)
    assert s is not None and "(the same link)" in s
    assert "An EP16 group would run over the network" in s and "shorter there" in s
    t_rack, net_rack = exchange_s(rack, m, 48)
    t_hgx, net_hgx = exchange_s(hgx, m, 48)
    assert (net_rack, net_hgx) == (False, True) and t_rack < t_hgx
    assert (
        topology_sentence(engine_cost_model(load_cluster("h100-sxm-8"), engine="sglang"), m, 8)
        is None
    )


def test_pd_decode_space_holds_wide_ep_within_the_rack_and_not_past_the_b200_node():
    """The P/D decode instances of a rack include every multiple of 8 GPUs within the NVLink
    domain (48 ranks with 32 redundant experts, as SGLang's GB200 deployment: 256 + 32 = 6 x
    48), never a size whose redundant experts would exceed E / 8; servers of 8 get only the
    powers of two (their wide EP crosses the network)."""
    from moeplan.search.disagg.pools import domain_decode_layouts, serve_layouts

    m = load_model("deepseek-v3")
    rack, hgx = load_cluster("gb200-nvl72"), load_cluster("b200-sxm-8", 9)
    wide = domain_decode_layouts(m, rack, rack.num_gpus - 1)
    eps = {(lay.moe_ep, lay.redundant_experts) for lay in wide}
    assert eps == {(24, 8), (40, 24), (48, 32), (56, 24)}
    assert all((256 + r) % ep == 0 and r <= 256 // 8 for ep, r in eps)
    assert Layout(attn_tp=1, attn_dp=48, moe_tp=1, moe_ep=48, redundant_experts=32) in wide
    assert max(lay.gpus for lay in wide) <= rack.num_gpus - 1
    assert domain_decode_layouts(m, hgx, hgx.num_gpus - 1) == []
    assert {lay.moe_ep for lay in serve_layouts(m, rack, 71)} == {1, 2, 4, 8, 16, 32, 64}
    # two racks: an instance of the whole domain (72 ranks, 32 redundant experts) joins
    two = load_cluster("gb200-nvl72", racks=2)
    assert (72, 32) in {(x.moe_ep, x.redundant_experts) for x in domain_decode_layouts(m, two, 143)}
