"""SGLang / vLLM exports: parsing the emitted flags back with each engine's documented
semantics must give the strategy that was exported; inexpressible ones say so."""

from __future__ import annotations

import pytest

from moeplan.errors import MoeplanError
from moeplan.export.constraints import Target
from moeplan.export.constraints import flags as _flags
from moeplan.export.launcher import render_launcher
from moeplan.export.sglang import sglang_args
from moeplan.export.vllm import vllm_args
from moeplan.planners.layout import Layout
from moeplan.planners.strategy.space import enumerate_strategies

# A DeepEP-capable machine (H100, NVSwitch, InfiniBand) and model, so every EP == TP strategy
# gets the deepep backend; the hardware/model rules are tested in test_export_constraints.py.
H100 = Target(
    architecture="DeepseekV3ForCausalLM",
    num_experts=256,
    gpu="h100-sxm",
    gpu_sm=90,
    gpu_nccl=True,
    gpu_deepep=True,
    intra="nvswitch",
    inter="ib",
    num_nodes=4,
    gpus_per_node=8,
)


def _sglang_semantics(f: dict[str, str]) -> Layout:
    """SGLang: tp-size GPUs per stage; DP attention -> attn TP tp/dp; MoE TP = tp/ep."""
    tp = int(f["--tp-size"])
    dp = int(f.get("--attn-dp-size", 1))
    ep = int(f.get("--ep-size", 1))
    return Layout(
        attn_tp=tp // dp, attn_dp=dp, moe_tp=tp // ep, moe_ep=ep, pp=int(f.get("--pp-size", 1))
    )


def _vllm_semantics(f: dict[str, str]) -> Layout:
    """vLLM: MoE group = TP x DP, all EP with --enable-expert-parallel, else all TP."""
    tp, dp = int(f["--tensor-parallel-size"]), int(f.get("--data-parallel-size", 1))
    ep = tp * dp if "--enable-expert-parallel" in f else 1
    return Layout(
        attn_tp=tp,
        attn_dp=dp,
        moe_tp=tp * dp // ep,
        moe_ep=ep,
        pp=int(f.get("--pipeline-parallel-size", 1)),
    )


@pytest.mark.parametrize("nodes,g", [(1, 8), (2, 8), (4, 8)])
def test_sglang_round_trip_over_whole_space(nodes, g):
    for s in enumerate_strategies(nodes, g):
        r = sglang_args(s, model_path="m", target=H100, num_nodes=nodes)
        f = _flags(r.args)
        back = _sglang_semantics(f)
        assert back.key()[:-1] == s.key()[:-1]
        assert ("--moe-a2a-backend" in f) == (s.moe_ep > 1 and s.moe_ep == s.stage_size)
        assert (f.get("--nnodes") == str(nodes)) == (nodes > 1)
        assert any("fused" in w for w in r.warnings) == s.fused


@pytest.mark.parametrize("nodes,g", [(1, 8), (2, 8), (4, 8)])
def test_vllm_round_trip_or_plain_refusal(nodes, g):
    for s in enumerate_strategies(nodes, g):
        r = vllm_args(s, model_path="m", target=H100, num_nodes=nodes)
        hybrid = s.moe_tp > 1 and s.moe_ep > 1
        assert r.expressible == (not hybrid)
        if hybrid:
            assert r.args == () and "cannot express" in r.warnings[0]
            continue
        assert _vllm_semantics(_flags(r.args)).key()[:-1] == s.key()[:-1]


def test_vllm_multinode_dp_flags_for_second_node():
    s = Layout(attn_tp=8, attn_dp=4, moe_tp=1, moe_ep=32)
    f = _flags(vllm_args(s, model_path="m", target=H100, num_nodes=4, node_rank=2).args)
    assert f["--data-parallel-size-local"] == "1" and f["--data-parallel-start-rank"] == "2"
    assert "--headless" in f


def test_bad_node_rank_is_a_user_error():
    s = Layout(attn_tp=8, attn_dp=1, moe_tp=8, moe_ep=1)
    with pytest.raises(MoeplanError, match="node_rank"):
        sglang_args(s, model_path="m", target=H100, num_nodes=1, node_rank=1)


def test_launcher_of_no_command_is_refused():
    with pytest.raises(MoeplanError):
        render_launcher([])
