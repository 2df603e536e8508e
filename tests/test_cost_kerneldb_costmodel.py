"""CostModel with an engine: kernel-database pricing, provenance, and the datasheet bound."""

from __future__ import annotations

import math

import pytest

from moeplan.cost import CostModel, cost_model_for
from moeplan.errors import MoeplanError
from moeplan.kernel_tables import kernel_db
from moeplan.specs import cluster_names, load_cluster, load_model, model_names

CLUSTERS = cluster_names()
MODELS = model_names()


def _peak_flops(cluster, fp8: bool) -> float:
    g = cluster.gpu
    return g.flops_bf16 * ((g.fp8_ratio or 1.0) if fp8 else 1.0)


@pytest.mark.parametrize("cluster_name", CLUSTERS)
def test_no_prediction_beats_the_datasheet(cluster_name: str) -> None:
    """Every preset model on every preset cluster, MoE and attention shapes: FLOP/s and
    bytes/s implied by each predicted time stay within the GPU's datasheet peaks."""
    cluster = load_cluster(cluster_name)
    cm = CostModel(cluster, engine="sglang", kernels=kernel_db())
    bw = cluster.gpu.mem_bw * (1 + 1e-9)
    for name in MODELS:
        m = load_model(name)
        if m.num_experts:
            fp8 = m.expert_weight_bytes == 1
            for ep in (1, 8):
                if m.num_experts % ep:
                    continue
                local = m.num_experts // ep
                for tpe in (1, 16, 256):
                    t = cm.expert_ffn(m, tpe, local)
                    flops = 6.0 * tpe * local * m.hidden_size * m.moe_intermediate_size
                    wbytes = (
                        local * 3 * m.hidden_size * m.moe_intermediate_size * m.expert_weight_bytes
                    )
                    assert flops / t <= _peak_flops(cluster, fp8) * (1 + 1e-9), (name, ep, tpe)
                    assert wbytes / t <= bw, (name, ep, tpe)
        tp = 8 if m.num_attention_heads >= 8 else 1
        heads = m.num_attention_heads / tp
        kv_div = 1 if m.attention == "mla" else min(tp, m.num_kv_heads)
        for seqs, q, ctx in ((64, 1, 4096), (8, 1, 32768), (1, 4096, 4096), (2, 512, 2048)):
            t = cm.attention_core(m, seqs, q, ctx, tp=tp)
            keys = ctx - (q - 1) / 2
            flops = 2.0 * seqs * q * keys * heads * (m.q_dim + m.vo_dim)
            kv = seqs * ctx * m.kv_bytes_per_token_layer() / kv_div
            assert flops / t <= cluster.gpu.flops_bf16 * (cluster.gpu.fp8_ratio or 1.0) * (
                1 + 1e-9
            ), (name, seqs, q, ctx)
            assert kv / t <= bw, (name, seqs, q, ctx)


def test_engine_none_is_the_old_model_exactly() -> None:
    c = load_cluster("h100-sxm-8")
    m = load_model("deepseek-v3")
    old, new = cost_model_for(c), CostModel(c, cost_model_for(c).profile)
    for args in ((m, 8.0, 32), (m, 300.0, 256, 2)):
        assert new.expert_ffn(*args) == old.expert_ffn(*args)
    assert new.attention_core(m, 32, 1, 4096, 8) == old.attention_core(m, 32, 1, 4096, 8)
    assert new.collective("all_reduce", 1 << 20, 8) == old.collective("all_reduce", 1 << 20, 8)
    assert new.provenance() == {}


def test_engine_prices_measured_kernels_and_reports_them() -> None:
    c = load_cluster("h100-sxm-8")
    m = load_model("deepseek-v3")
    cm = CostModel(c, engine="sglang", kernels=kernel_db())
    t = kernel_db().tables[("h100_sxm", "sglang", "moe")]
    # DeepSeek-V3 fp8 MoE, EP8, 1024 tokens, balanced: a measured row of the table
    import numpy as np

    sel = (
        (t.columns["hidden_size"] == 7168)
        & (t.columns["num_experts"] == 256)
        & (t.columns["moe_ep_size"] == 8)
        & (t.columns["moe_tp_size"] == 1)
        & (t.columns["num_tokens"] == 1024)
        & (t.columns["moe_dtype"] == "fp8_block")
        & (t.columns["distribution"] == "balanced")
        & (t.columns["kernel_source"] == "sglang_fused_moe_triton")
    )
    assert sel.sum() == 1
    got = cm.expert_ffn(m, 1024 * 8 / 256, 32)
    assert got == pytest.approx(float(t.latency[np.flatnonzero(sel)[0]]), rel=1e-9)
    cm.attention_core(m, 16, 1, 1000, tp=8)
    cm.collective("all_reduce", 7168 * 2 * 64, 8)
    prov = cm.provenance()
    assert prov["moe"]["measured"]["calls"] == 1
    assert set(prov) == {"moe", "generation_mla", "allreduce"}
    for cells in prov.values():
        for src, cell in cells.items():
            assert src in ("measured", "interpolated", "transferred", "roofline")
            assert cell["error_median"] is None or 0 <= cell["error_median"] < 1


def test_engines_differ_and_unknown_engine_is_rejected() -> None:
    c = load_cluster("h100-sxm-8")
    m = load_model("qwen3-30b-a3b")
    times = {
        e: CostModel(c, engine=e, kernels=kernel_db()).expert_ffn(m, 64, m.num_experts // 8)
        for e in ("sglang", "vllm", "trtllm")
    }
    assert len({round(v, 9) for v in times.values()}) == 3
    assert all(math.isfinite(v) and v > 0 for v in times.values())
    with pytest.raises(MoeplanError, match="engine"):
        CostModel(c, engine="tgi")


def test_mla_layer_from_the_engines_module_table() -> None:
    """DeepSeek-V3 attention layer with vLLM on H100 = the measured module row; SGLang has
    no module table and keeps projections + core; engine=None is untouched."""
    import numpy as np

    c = load_cluster("h100-sxm-8")
    m = load_model("deepseek-v3")
    t = kernel_db().tables[("h100_sxm", "vllm", "generation_mla_module")]
    cols = t.columns
    sel = (
        (cols["num_heads"] == 16)
        & (cols["batch_size"] == 32)
        & (cols["step"] == 4096)
        & (cols["gemm_type"] == "fp8_block")
        & (cols["kv_cache_dtype"] == "bfloat16")
        & (cols["kernel_source"] == "FLASH_ATTN_MLA")
    )
    assert sel.sum() > 0, (
        "the measured vLLM MLA decode row (16 heads, batch 32, KV 4096, fp8_block, bf16 KV, "
        "FLASH_ATTN_MLA) is missing from h100_sxm/vllm generation_mla_module: the table shipped "
        "without the row this test prices"
    )
    cm = CostModel(c, engine="vllm", kernels=kernel_db())
    got = cm.attention_layer(m, 32, 1, 4097, tp=8)
    assert cm.provenance() == {
        "generation_mla_module": {"measured": {"calls": 1, "error_median": 0.0, "error_p90": 0.0}}
    }
    assert got == pytest.approx(float(np.median(t.latency[sel])), rel=1e-9)
    sg = CostModel(c, engine="sglang", kernels=kernel_db())
    sg.attention_layer(m, 32, 1, 4097, tp=8)
    assert "generation_mla_module" not in sg.provenance()
    # a prefix adds the core's extra keys on top of the module's prefill
    vl = CostModel(c, engine="vllm", kernels=kernel_db())
    assert vl.attention_layer(m, 1, 1024, 4096, tp=8) > vl.attention_layer(m, 1, 1024, 1024, tp=8)
