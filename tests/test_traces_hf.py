"""HF recorder on tiny random Qwen2-MoE, Mixtral and DeepSeek-V3 models built from configs."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from moeplan.traces.format import load_trace, save_trace  # noqa: E402
from moeplan.traces.hf_recorder import find_routers, record_trace  # noqa: E402


def _qwen():
    cfg = transformers.Qwen2MoeConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=8,
        num_experts_per_tok=2,
    )
    return transformers.Qwen2MoeForCausalLM(cfg), 8, 2, 2


def _mixtral():
    cfg = transformers.MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    return transformers.MixtralForCausalLM(cfg), 4, 2, 2


def _deepseek():
    cfg = transformers.DeepseekV3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        n_shared_experts=1,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
    )
    return transformers.DeepseekV3ForCausalLM(cfg), 8, 2, 2


@pytest.mark.parametrize(
    "build", [_qwen, _mixtral, _deepseek], ids=["qwen2moe", "mixtral", "deepseek_v3"]
)
def test_recorded_experts_equal_router_topk(build, tmp_path):
    """Recorded ids equal each router's own top-k on the same hidden states (captured by an
    independent pre-hook), per token and layer; the trace round-trips through a file."""
    torch.manual_seed(0)
    model, e, k, moe_layers = build()
    model.eval()
    routers = find_routers(model)
    assert len(routers) == moe_layers
    inputs = {i: [] for i in range(len(routers))}
    hooks = [
        mod.register_forward_pre_hook(
            lambda _m, a, i=i: inputs[i].append(a[0].detach().reshape(-1, a[0].shape[-1]))
        )
        for i, (_, mod) in enumerate(routers)
    ]
    # the first layer's router must see different hidden states per token
    with torch.no_grad():
        for _, mod in routers:
            mod.weight.normal_()
    prompts = [[1, 5, 9, 2, 33], [7, 8], [60, 61, 62]]
    tr = record_trace(model, prompts, top_k=k, num_experts=e)
    for h in hooks:
        h.remove()
    assert tr.experts.shape == (10, moe_layers, k)
    assert tr.request_id.tolist() == [0] * 5 + [1] * 2 + [2] * 3
    for i, (_, mod) in enumerate(routers):
        hidden = torch.cat(inputs[i])
        with torch.no_grad():
            out = mod(hidden)
        ref = out[2] if isinstance(out, tuple) else torch.topk(out.softmax(-1), k)[1]
        got = np.sort(tr.experts[:, i], axis=1)
        assert np.array_equal(got, np.sort(ref.numpy(), axis=1))
    save_trace(tr, tmp_path / "hf.parquet")
    assert np.array_equal(load_trace(tmp_path / "hf.parquet").experts, tr.experts)
