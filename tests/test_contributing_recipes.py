"""CONTRIBUTING.md's recipes, each followed once with a fake thing: a GPU, a model family, a
mixer (layer) kind and a planner family. Each test adds its fake through the registry the
recipe names, checks that moeplan reads, sizes, prices or ranks it as the recipe says, and
leaves every registry as it found it (``monkeypatch``)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

import moeplan.specs
from moeplan.cost import cost_model_for
from moeplan.cost.kerneldb import device_for
from moeplan.cost.mixer_prices import stand_in_note, stand_ins
from moeplan.errors import MoeplanError
from moeplan.specs import layer_math, load_cluster, load_model, model_from_dict
from moeplan.specs import layers as layer_kinds
from moeplan.specs.arch_families import dense, gqa, moe, n_layers
from moeplan.specs.architectures import ARCHITECTURES, Architecture
from moeplan.specs.config_reader import Cfg
from moeplan.specs.layers import LayerSpec, Mixer
from moeplan.specs.presets import cluster_table

# ---- a GPU -------------------------------------------------------------------------------


def test_a_new_gpu_is_one_record_then_loaded_and_priced(tmp_path, monkeypatch):
    """Recipe "A GPU": one ``gpus`` record (every field with its source) and a ``clusters``
    entry naming it; ``load_cluster`` reads it, the kernel device and the cost model use
    only it. The fake is an H100 SXM with twice the bf16 rate and bandwidth: a large
    compute-bound GEMM on its roofline takes half the time."""
    table = copy.deepcopy(cluster_table())
    rec = dict(table["gpus"]["h100-sxm"], flops_bf16=2 * table["gpus"]["h100-sxm"]["flops_bf16"])
    rec["mem_bw"] *= 2
    rec["sources"] = {k: "test: twice an H100 SXM" for k in rec["sources"]}
    path = tmp_path / "fake-gpu.json"
    path.write_text(json.dumps({"fake-gpu": rec}))
    table["gpus"].update(json.loads(path.read_text()))
    table["clusters"]["fake-gpu-8"] = dict(table["clusters"]["h100-sxm-8"], gpu="fake-gpu")
    monkeypatch.setattr(moeplan.specs, "cluster_table", lambda: table)

    fake, ref = load_cluster("fake-gpu-8"), load_cluster("h100-sxm-8")
    assert fake.gpu.name == "fake-gpu" and fake.gpu.flops_bf16 == pytest.approx(
        2 * ref.gpu.flops_bf16, rel=1e-12
    )
    assert "fake-gpu" in moeplan.specs.gpu_records()
    d = device_for(fake)
    assert d.reference == "h100_sxm" and d.sm_count == ref.gpu.sm_count
    m = n = k = 16384
    slow = cost_model_for(ref, "roofline").gemm(m, n, k)
    fast = cost_model_for(fake, "roofline").gemm(m, n, k)
    assert fast == pytest.approx(slow / 2, rel=1e-3)

    rec_missing = {k: v for k, v in rec.items() if k != "sm_count"}
    table["gpus"]["fake-gpu"] = rec_missing
    with pytest.raises(MoeplanError, match=r"gpus\[fake-gpu\]\.sm_count"):
        load_cluster("fake-gpu-8")


# ---- a model family ----------------------------------------------------------------------

V, H, L, HEADS, KV, D = 1000, 64, 3, 4, 2, 16  # vocabulary, hidden, layers, heads, KV heads
I_DENSE, E, TOP_K, I_MOE = 128, 8, 2, 32  # dense FFN; experts, routed per token, expert FFN
FAKE_CONFIG = {
    "architectures": ["FakeMoeForCausalLM"],
    "vocab_size": V,
    "hidden_size": H,
    "num_hidden_layers": L,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
    "head_dim": D,
    "intermediate_size": I_DENSE,
    "num_experts": E,
    "num_experts_per_tok": TOP_K,
    "moe_intermediate_size": I_MOE,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def fake_reader(c: Cfg) -> tuple[LayerSpec, ...]:
    """GQA everywhere; the first ``first_k_dense_replace`` layers dense, the rest MoE."""
    first = c.int("first_k_dense_replace", default=0)
    return tuple(
        LayerSpec(mixer=gqa(c), ffn=dense(c) if i < first else moe(c)) for i in range(n_layers(c))
    )


def register_fake_family(monkeypatch, reader=fake_reader) -> None:
    fake = Architecture(name="FakeMoeForCausalLM", read=reader, embedding_active=True,
                        sample="", source="test: a fake MoE family")  # fmt: skip
    monkeypatch.setitem(ARCHITECTURES, fake.name, fake)


def test_a_new_model_family_is_one_reader_and_one_entry(monkeypatch):
    """Recipe "A model family": unknown until its entry is in ``ARCHITECTURES``; then its
    config is read through the reader into per-layer records and sized by hand."""
    with pytest.raises(MoeplanError, match="not a supported architecture"):
        model_from_dict(FAKE_CONFIG, "fake")
    register_fake_family(monkeypatch)
    m = model_from_dict(FAKE_CONFIG, "fake")
    assert m.layer_kinds and m.num_moe_layers == L - 1 and m.num_dense_layers == 1
    attn = H * HEADS * D + 2 * H * KV * D + HEADS * D * H  # q, k, v, o
    norms = 2 * H  # two RMSNorm vectors per layer
    dense_ffn = 3 * H * I_DENSE  # gate, up, down
    expert, router = 3 * H * I_MOE, H * E
    layers = (attn + norms + dense_ffn) + (L - 1) * (attn + norms + E * expert + router)
    assert m.params_total == layers + 2 * V * H + H  # embedding, lm-head, final norm
    active = (attn + norms + dense_ffn) + (L - 1) * (attn + norms + TOP_K * expert + router)
    assert m.params_active == active + 2 * V * H + H
    assert m.kv_bytes_per_token == 2 * KV * D * 2 * L  # K and V, bf16, every layer


# ---- a layer kind ------------------------------------------------------------------------


def test_a_new_mixer_kind_is_priced_by_the_stand_in_and_says_so(monkeypatch):
    """Recipe "A layer kind": a kind outside ``MIXER_KINDS`` is refused in one line; once
    listed (here with a KV cache, like attention) a model with it is sized and priced, and
    until the cost model prices it as its own kind every plan names the stand-in."""
    with pytest.raises(MoeplanError, match=r"mixer\[fake\]\.kind \('fake'\) must be one of"):
        Mixer(kind="fake", num_heads=HEADS, num_kv_heads=KV, head_dim=D)
    monkeypatch.setattr(layer_kinds, "MIXER_KINDS", (*layer_kinds.MIXER_KINDS, "fake"))
    monkeypatch.setattr(layer_kinds, "ATTENTION_KINDS", (*layer_kinds.ATTENTION_KINDS, "fake"))

    def reader(c: Cfg) -> tuple[LayerSpec, ...]:
        base = fake_reader(c)
        return (replace(base[0], mixer=gqa(c, "fake")), *base[1:])

    register_fake_family(monkeypatch, reader)
    m = model_from_dict(FAKE_CONFIG, "fake")
    first = m.layer_specs[0]
    plain = replace(m, layers=(replace(first, mixer=replace(first.mixer, kind="mha")),
                               *m.layer_specs[1:]))  # fmt: skip
    assert [x.mixer.kind for x in m.layer_specs] == ["fake", "mha", "mha"]
    # its weights and cache count only once layer_math knows them (here: as a GQA layer's)
    attn = H * HEADS * D + 2 * H * KV * D + HEADS * D * H
    assert m.params_total == plain.params_total - attn
    assert m.kv_bytes_per_token == plain.kv_bytes_per_token - 2 * KV * D * 2
    for name in ("mixer_linear_params", "kv_bytes_per_token"):
        as_gqa = getattr(layer_math, name)
        monkeypatch.setattr(layer_math, name, lambda mx, *a, f=as_gqa: f(
            replace(mx, kind="mha") if mx.kind == "fake" else mx, *a))  # fmt: skip
    m = model_from_dict(FAKE_CONFIG, "fake")
    assert m.params_total == plain.params_total and m.kv_bytes_per_token == plain.kv_bytes_per_token
    assert stand_ins(m) == {"fake": 1} and "fake" in (stand_in_note(m) or "")
    cm = cost_model_for(load_cluster("h100-sxm-8"), "roofline")
    t = cm.attention_layer(m, num_seqs=4, q_len=128, ctx_len=128, layer=0)
    assert t == pytest.approx(
        cm.attention_layer(plain, num_seqs=4, q_len=128, ctx_len=128, layer=0)
    )
    assert t > 0


# ---- a planner family --------------------------------------------------------------------


def test_a_new_planner_family_is_ranked_with_the_others(monkeypatch):
    """Recipe "A planner family": a :class:`Family` record in ``FAMILY`` and an adapter in
    ``ADAPTERS``; ``plan`` runs it beside the others and ranks it on prompt tokens/s per GPU.
    The fake proposes the strategy family's best plan at twice its rate, so it must win."""
    from moeplan.planners import families as fam
    from moeplan.planners import rank

    fake = fam.Family(name="fake", title="fake family (test)", plan_family="strategy",
                      layout="colocated", proposer="Test", not_served="a test's fake",
                      launch="colocated")  # fmt: skip

    def adapter(model, cluster, workload, cm):
        best = rank.strategy_candidate(model, cluster, workload, cm)
        return replace(best, family="fake", prefill_tokens_per_s=2 * best.prefill_tokens_per_s)

    monkeypatch.setitem(fam.FAMILY, "fake", fake)
    monkeypatch.setitem(rank.FAMILY_NAMES, "fake", fake.title)
    monkeypatch.setitem(rank.ADAPTERS, "fake", adapter)
    m, c = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm-8")
    w = moeplan.specs.Workload(phase="prefill", batch=8, isl=1024, osl=1)
    res = rank.plan(m, c, w, cost_model_for(c, "roofline"), families=["strategy", "fake"])
    assert [x.family for x in res.candidates] == ["fake", "strategy"]
    assert res.candidates[0].per_gpu == pytest.approx(2 * res.candidates[1].per_gpu)
    assert res.explanation[0].startswith("The fake family (test) plan wins")
    with pytest.raises(MoeplanError, match=r"families \('other'\) must be among"):
        rank.plan(m, c, w, cost_model_for(c, "roofline"), families=["other"])
