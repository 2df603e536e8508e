"""Per-layer shapes the cost model prices: DeepSeek-V4's hyper-connections (mHC) and attention
layers whose heads differ from the model's first full-attention layer (Gemma-4).

Oracles: NVIDIA's measured mHC rows read straight from the shipped parquet files, the mHC
weight shapes of DeepSeek-V4's modelling code, and the kernel-table queries built here by hand
from the raw ``config.json`` keys of each layer kind.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from importlib import resources
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from moeplan.cost import CostModel
from moeplan.kernel_tables import engine_cost_model
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.serve.layout import ServeLayout
from moeplan.specs import ModelSpec, load_cluster, load_model

KERNELS = resources.files("moeplan").joinpath("data", "measured", "kernels", "h100_sxm")
CONFIGS = Path(__file__).parent / "data" / "configs"
V4 = CONFIGS / "deepseek-ai--DeepSeek-V4-Flash" / "config.json"
GEMMA = CONFIGS / "google--gemma-4-26B-A4B" / "config.json"


@cache
def _v4() -> ModelSpec:
    return load_model(str(V4))


def _without_hc(m: ModelSpec) -> ModelSpec:
    layers = tuple(replace(x, hc_mult=0, hc_sinkhorn_iters=0) for x in m.layer_specs)
    return replace(m, layers=layers, _layers=(), _moe_flags=())


def _mhc_row(engine: str, version: str, op: str, tokens: int, hidden: int) -> float:
    t = pq.read_table(str(KERNELS.joinpath("mhc", engine, version, "mhc_module_perf.parquet")))
    d = t.to_pandas()
    d = d[(d.op_name == op) & (d.num_tokens == tokens) & (d.hidden_size == hidden)]
    assert len(d) == 1
    return float(d.latency.iloc[0]) * 1e-3  # ms -> s


def test_v4_reads_hc_mult_and_counts_the_mhc_weights():
    """config.json hc_mult 4, hc_sinkhorn_iters 20; per layer two sites, each a
    [(2 + 4) x 4, 4 x hidden] fp32 projection, its [24] bias and [3] scales."""
    raw = json.loads(V4.read_text())
    m = _v4()
    assert {(x.hc_mult, x.hc_sinkhorn_iters) for x in m.layer_specs} == {(4, 20)}
    mix, h = (2 + raw["hc_mult"]) * raw["hc_mult"], raw["hidden_size"]
    by_hand = raw["num_hidden_layers"] * 2 * (mix * raw["hc_mult"] * h + mix + 3)
    assert m.params_total - _without_hc(m).params_total == by_hand


@pytest.mark.parametrize(("engine", "version"), [("sglang", "0.5.14"), ("vllm", "0.24.0")])
def test_mhc_of_a_measured_shape_is_its_pre_and_post_rows(engine, version):
    cm = engine_cost_model(load_cluster("h100-sxm-8"), None, engine)
    m = _v4()
    d = pq.read_table(str(KERNELS.joinpath("mhc", engine, version, "mhc_module_perf.parquet")))
    tokens = sorted(set(d.column("num_tokens").to_pylist()))
    for t in (tokens[0], tokens[len(tokens) // 2], tokens[-1]):
        want = _mhc_row(engine, version, "pre", t, 4096) + _mhc_row(engine, version, "post", t,
                                                                     4096)  # fmt: skip
        assert cm.hyper_connections(m, t, 0) == pytest.approx(want, rel=1e-6)
    assert cm.hyper_connections(_without_hc(m), 64, 0) == 0.0


def test_mhc_is_in_the_serving_iteration_once_per_layer():
    """The iteration's attention part of V4-Flash exceeds the same model without mHC by
    layers x the layer's mHC price for the rank's tokens."""
    cl = load_cluster("h100-sxm-8")
    cm = engine_cost_model(cl, None, "sglang")
    layout = ServeLayout(attn_tp=1, attn_dp=8, moe_tp=1, moe_ep=8, pp=1)
    batch = Batch(decode=64, decode_ctx=8192)
    m = _v4()
    with_hc = IterationModel(m, cl, cm, layout).breakdown(batch)["attention"]
    plain = IterationModel(_without_hc(m), cl, cm, layout).breakdown(batch)["attention"]
    per_rank = 64 // 8  # attention DP: the busiest rank's sequences, one token each
    want = m.num_layers * cm.hyper_connections(m, per_rank, 0)
    assert with_hc - plain == pytest.approx(want, rel=1e-9)


def test_planners_attention_layer_carries_the_mhc_once():
    """``attention_layer`` (the planners' price of a layer) adds the mean mHC of the layers
    for the rank's tokens: the same model without mHC costs exactly that less."""
    cm = engine_cost_model(load_cluster("h100-sxm-8"), None, "sglang")
    m = _v4()
    for seqs, q, ctx in ((32, 1, 8192), (1, 2048, 2048)):
        gap = cm.attention_layer(m, seqs, q, ctx) - cm.attention_layer(_without_hc(m), seqs, q, ctx)
        assert gap == pytest.approx(cm.hyper_connections(m, seqs * q, 0), rel=1e-9)
        assert cm.attention_layer(m, seqs, q, ctx, hc=False) == pytest.approx(
            cm.attention_layer(_without_hc(m), seqs, q, ctx), rel=1e-9
        )


def test_mhc_without_tables_is_a_positive_roofline():
    m = _v4()
    cm = CostModel(load_cluster("h100-sxm-8"))
    assert 0 < cm.hyper_connections(m, 64, 0) < cm.hyper_connections(m, 65536, 0)


# ---- Gemma-4: sliding layers 8 K/V heads of 256, global layers 2 of 512 ------------------------
def _gemma_layers() -> tuple[ModelSpec, int, int]:
    m = load_model(str(GEMMA))
    sliding = next(i for i, x in enumerate(m.layer_specs) if x.mixer.kind == "swa")
    full = next(i for i, x in enumerate(m.layer_specs) if x.mixer.kind == "mha")
    return m, sliding, full


@pytest.mark.parametrize("kind", ["sliding", "global"])
def test_gemma4_attention_uses_each_layer_kind_heads(kind):
    """Decode attention of each layer kind is the kernel row of that kind's own heads, head
    dim and window, as the raw config keys give them."""
    raw = json.loads(GEMMA.read_text())["text_config"]
    cm = engine_cost_model(load_cluster("h100-sxm-8"), None, "sglang")
    m, sliding, full = _gemma_layers()
    layer = sliding if kind == "sliding" else full
    heads = {
        "sliding": (raw["num_key_value_heads"], raw["head_dim"], raw["sliding_window"]),
        "global": (raw["num_global_key_value_heads"], raw["global_head_dim"], 0),
    }[kind]
    shape = dict(batch_size=32, num_heads=raw["num_attention_heads"], num_key_value_heads=heads[0],
                 head_dim=heads[1], window_size=heads[2], isl=1, step=16383)  # fmt: skip
    want = cm._kdb.predict("generation_attention", cm._device, "sglang", **shape).seconds
    assert cm.attention_core(m, 32, 1, 16384, 1, layer) == pytest.approx(want, rel=1e-9)


def test_gemma4_model_mean_is_its_layers_sum_without_tables():
    """Without kernel tables the model-level attention is the mean of its layers' prices,
    and a sliding layer's decode stops growing past its window."""
    cm = CostModel(load_cluster("h100-sxm-8"))
    m, sliding, full = _gemma_layers()
    brute = sum(cm.attention_layer(m, 16, 1, 32768, 1, i) for i in range(m.num_layers))
    assert cm.attention_layer(m, 16, 1, 32768, 1) == pytest.approx(brute / m.num_layers)
    assert cm.attention_core(m, 16, 1, 32768, 1, sliding) == pytest.approx(
        cm.attention_core(m, 16, 1, 65536, 1, sliding)
    )
    assert cm.attention_core(m, 16, 1, 65536, 1, full) > cm.attention_core(m, 16, 1, 32768, 1, full)
