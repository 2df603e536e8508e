"""Engine constraints (export/constraints.py): each rule against hand-made violating argument
lists, the hardware/model table against the sources' statements, and every argument list the
exports emit (whole strategy space, 1-4 nodes, every node rank) against the rules."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as hst

from moeplan.export import constraints as cons
from moeplan.export.sglang import sglang_args
from moeplan.export.vllm import vllm_args
from moeplan.planners.layout import Layout
from moeplan.planners.strategy.space import enumerate_strategies
from moeplan.specs import gpu_records, load_cluster, load_model


def target(
    arch="DeepseekV3ForCausalLM", gpu="h100-sxm", intra="nvswitch", inter="ib", nodes=1, experts=256
) -> cons.Target:
    g = gpu_records()[gpu]
    return cons.Target(
        architecture=arch,
        num_experts=experts,
        gpu=gpu,
        gpu_sm=g.sm_version,
        gpu_nccl=g.nccl,
        gpu_deepep=g.deepep,
        intra=intra,
        inter=inter,
        num_nodes=nodes,
        gpus_per_node=8,
    )


# What the sources say, written out by hand (not derived from the tables under test):
# DeepEP needs SM90+ (Hopper H100/H200/H800/H20, Blackwell B200) + full NVLink P2P inside a
# node + RDMA across nodes (DeepEP README); not on Ampere/Ada (A100, A6000, A10, A40, L40S),
# Ascend, or a GPU its source does not name (gpu-96g). SGLang's DeepEP path: families with a
# forward_deepep branch (DeepSeek V2/V3/V3.2, GLM-5, Qwen2/3-MoE, Qwen3.5, MiniMax-M2, MiMo, ...)
# with fp8 block-scaled experts: sglang 0.5.23 layers/moe/ep_moe/layer.py:291 raises
# "Unquantized DeepEP MoE currently supports low_latency mode only" (the BF16 presets),
# gpt_oss.py:277 "forward_deepep branch not implemented yet"; Kimi-K2.5's int4 experts hit
# the same DeepEPMoE (no w4a16 DeepEP path).
DEEPEP_CLUSTERS = {
    "findep-c", "findep-d", "mixserve-h20", "h100-sxm-8", "h200-sxm-8", "h800-sxm-8", "b200-8",
    "gb200-4",
}  # fmt: skip
DEEPEP_MODELS = {"deepseek-v3", "kimi-k2", "glm-5-fp8", "qwen3-235b-a22b-2507-fp8"}


def test_deepep_table_matches_the_sources_for_every_preset():
    from moeplan.specs import cluster_names, model_names

    for mn in model_names():
        for cn in cluster_names():
            c = load_cluster(cn)
            t = cons.Target.of(load_model(mn), c)
            ok = not cons.deepep_blockers(t, c.num_nodes)
            assert ok == (mn in DEEPEP_MODELS and cn in DEEPEP_CLUSTERS), (mn, cn)


def test_deepep_blockers_name_the_reason():
    a6000 = cons.deepep_blockers(target(gpu="a6000", intra="nvlink-pairs"), 1)
    assert any("SM86" in b for b in a6000) and any("nvlink-pairs" in b for b in a6000)
    assert any("GptOss" in b for b in cons.deepep_blockers(target(arch="GptOssForCausalLM"), 1))
    assert any("RDMA" in b for b in cons.deepep_blockers(target(inter="ethernet"), 2))
    assert not cons.deepep_blockers(target(inter="ethernet"), 1)  # one node needs no RDMA


VALID = [
    "python",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "m",
    "--tp-size",
    "8",
    "--attn-dp-size",
    "8",
    "--ep-size",
    "8",
    "--moe-a2a-backend",
    "deepep",
]


@pytest.mark.parametrize(
    "change,rule",
    [
        ({"--ep-size": "4"}, "ep_size == tp_size"),
        ({"--enable-dp-attention": ""}, "not a flag of sglang 0.5.2x"),
        ({"--attn-dp-size": "3"}, "divisible by the attention DP size"),
        (
            {"--ep-num-redundant-experts": "8", "--ep-size": "1", "--moe-a2a-backend": "none"},
            "needs ep_size > 1",
        ),
        ({"--ep-num-redundant-experts": "4"}, "split evenly"),
        ({"--nnodes": "2"}, "--node-rank in [0, nnodes)"),
        ({"--tp-size": "16", "--ep-size": "16"}, "plan's GPUs"),
    ],
)
def test_each_sglang_rule_catches_its_violation(change, rule):
    f = cons.flags(VALID)
    f.update(change)
    args = [a for k, v in f.items() for a in ([k, v] if v else [k])]
    assert not cons.check_sglang(VALID, target(), gpus_used=8)
    bad = cons.check_sglang(args, target(), gpus_used=8)
    assert any(rule in b for b in bad), bad


def test_sglang_location_width_must_be_experts_plus_redundant():
    args = [*VALID, "--init-expert-location", "x.json", "--ep-num-redundant-experts", "8"]
    assert not cons.check_sglang(args, target(), gpus_used=8, location_width=264)
    assert cons.check_sglang(args, target(), gpus_used=8, location_width=256)


def test_legacy_spelling_is_valid_only_for_the_legacy_release():
    s = Layout(attn_tp=1, attn_dp=8, moe_tp=1, moe_ep=8)
    old = sglang_args(
        s, model_path="m", target=target(), num_nodes=1, version=cons.SGLANG_LEGACY
    ).args
    new = sglang_args(s, model_path="m", target=target(), num_nodes=1).args
    assert "--enable-dp-attention" in old and "--attn-dp-size" in new
    assert not cons.check_sglang(old, target(), gpus_used=8, version=cons.SGLANG_LEGACY)
    assert cons.check_sglang(old, target(), gpus_used=8)
    assert cons.check_sglang(new, target(), gpus_used=8, version=cons.SGLANG_LEGACY)


VLLM_OK = [
    "vllm",
    "serve",
    "m",
    "--tensor-parallel-size",
    "1",
    "--data-parallel-size",
    "8",
    "--enable-expert-parallel",
    "--enable-eplb",
    "--eplb-config",
    '{"num_redundant_experts": 8}',
]


@pytest.mark.parametrize(
    "drop,t,rule",
    [
        ("--enable-expert-parallel", target(), "needs --enable-expert-parallel"),
        (None, target(arch="GptOssForCausalLM"), "does not support GptOssForCausalLM"),
        (None, target(gpu="ascend-910b", intra="hccs", inter="roce"), "CUDA/ROCm"),
        ("--enable-eplb", target(), "needs --enable-eplb"),
    ],
)
def test_each_vllm_rule_catches_its_violation(drop, t, rule):
    assert not cons.check_vllm(VLLM_OK, target(), gpus_used=8)
    args = [a for a in VLLM_OK if a != drop]
    assert any(rule in b for b in cons.check_vllm(args, t, gpus_used=8))


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("where", ["h100", "a6000", "ascend"])
def test_every_emitted_arg_list_passes_the_rules(nodes, where):
    t = {
        "h100": target(nodes=nodes),
        "a6000": target(gpu="a6000", intra="nvlink-pairs", nodes=nodes),
        "ascend": target(
            arch="Qwen3MoeForCausalLM",
            gpu="ascend-910b",
            intra="hccs",
            inter="roce",
            nodes=nodes,
            experts=128,
        ),
    }[where]
    for s in enumerate_strategies(nodes, 8):
        for rank in range(nodes):
            sg = sglang_args(s, model_path="m", target=t, num_nodes=nodes, node_rank=rank)
            assert not cons.check_sglang(sg.args, t, gpus_used=s.world_size), (s, rank)
            vl = vllm_args(s, model_path="m", target=t, num_nodes=nodes, node_rank=rank)
            if vl.args[:2] == ("ray", "start"):  # a Ray worker node joins the head
                head = vllm_args(s, model_path="m", target=t, num_nodes=nodes).args
                assert rank > 0 and cons.flags(head)["--distributed-executor-backend"] == "ray"
            elif vl.expressible:
                assert not cons.check_vllm(vl.args, t, gpus_used=s.world_size, node_rank=rank)
            else:
                assert "cannot express" in vl.warnings[0] and s.moe_tp > 1 and s.moe_ep > 1
        if where != "h100":
            assert "deepep" not in sglang_args(s, model_path="m", target=t, num_nodes=nodes).args


@given(redundant=hst.integers(0, 64), ep=hst.sampled_from([2, 4, 8]))
def test_vllm_eplb_only_where_it_runs(redundant, ep):
    s = Layout(attn_tp=1, attn_dp=ep, moe_tp=1, moe_ep=ep)
    for t, runs in (
        (target(), True),
        (target(arch="GptOssForCausalLM"), False),
        (target(gpu="ascend-910b", intra="hccs", inter="roce"), False),
    ):
        r = vllm_args(s, model_path="m", target=t, num_nodes=1, redundant_experts=redundant)
        f = cons.flags(r.args)
        assert ("--enable-eplb" in f) == (runs and redundant > 0)
        if "--eplb-config" in f:
            assert json.loads(f["--eplb-config"]) == {"num_redundant_experts": redundant}
        assert not cons.check_vllm(r.args, t, gpus_used=ep)
        assert (redundant > 0 and not runs) == any("not emitted" in w for w in r.warnings)


# DeepEP per GPU, by hand from the sources (DeepEP README: SM90+ CUDA GPUs; Blackwell B200 runs
# it in SGLang's GB200/B200 wide-EP deployments; Ampere, Ada and Ascend do not)
DEEPEP_GPUS = {"h100-sxm", "h200-sxm", "h800", "h20", "b200", "gb200"}


@pytest.mark.parametrize("gpu", sorted(gpu_records()))
def test_sglang_export_has_deepep_exactly_on_the_gpus_that_run_it(gpu: str) -> None:
    """One EP == TP strategy of DeepSeek-V3 on 8 of ``gpu`` behind an NVSwitch: the export
    carries ``--moe-a2a-backend deepep`` iff the GPU runs DeepEP; a GPU that does not is
    named with its reason (its compute capability, or not a CUDA GPU), never 'unknown'."""
    t = target(gpu=gpu)
    s = Layout(attn_tp=8, attn_dp=1, moe_tp=1, moe_ep=8, pp=1)
    out = sglang_args(s, model_path="m", target=t, num_nodes=1)
    has = "deepep" in out.args
    assert has == (gpu in DEEPEP_GPUS), gpu
    if not has:
        why = " ".join(out.warnings)
        assert "unknown compute capability" not in why and gpu in why, why
