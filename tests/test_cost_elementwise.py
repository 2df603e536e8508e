"""Element-wise passes of a decoder layer (:mod:`moeplan.cost.elementwise`): closed-form bytes
per token, priced once per layer at the GEMM model's memory rate (the measured whole-stack
prefill on an H200 is their oracle in ``tests/test_gpu_phase_data.py``)."""

from __future__ import annotations

import pytest

from moeplan.cost import CostModel
from moeplan.cost import elementwise as ew
from moeplan.cost.model import DEFAULT_BW_EFF
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.serve.iteration.phase import PhaseModel
from moeplan.specs import load_cluster, load_model

QWEN = load_model("qwen3-30b-a3b")  # h 2048, 32 q / 4 kv heads of 128, QK-norm, 48 layers


def test_bytes_per_token_are_the_closed_forms():
    # two fused add-RMSNorms: read x and the residual, write both, bf16
    assert ew.layer_norm_bytes(QWEN) == 2 * 4 * 2048 * 2
    assert ew.final_norm_bytes(QWEN) == 4 * 2048 * 2
    # QK-norm and RoPE: each reads and writes 36 heads of 128
    assert ew.attention_bytes(QWEN) == 2 * 2 * (32 + 4) * 128 * 2
    assert ew.attention_bytes(QWEN, tp=4) == 2 * 2 * (8 + 1) * 128 * 2
    v3 = load_model("deepseek-v3")  # MLA: rope on 128 query heads + the shared key, latent norms
    assert ew.attention_bytes(v3) == 2 * (64 * 129 + 512 + 1536) * 2
    assert ew.swiglu_act_bytes(2048, 2) == 3 * 1024 * 2


def test_a_pass_is_its_bytes_at_the_derated_bandwidth():
    c = load_cluster("h100-sxm-8")
    cm = CostModel(c)
    assert cm.elementwise(1e9) == pytest.approx(1e9 / (c.gpu.mem_bw * DEFAULT_BW_EFF), rel=1e-12)
    assert cm.elementwise(0.0) == 0.0


@pytest.mark.parametrize("tokens", [1, 4096, 16384])
def test_phase_step_charges_each_pass_once_per_layer(monkeypatch, tokens):
    """The prefill step with the passes less the step without them is the closed form: 48
    layers of two norms, QK-norm and RoPE, plus the final norm (Qwen3-30B has no dense or
    shared MLP), at the datasheet bandwidth derated."""
    c = load_cluster("h200-sxm-8")
    lay, kn = Layout(), InstanceKnobs()
    with_ew = PhaseModel(QWEN, c, CostModel(c), lay, kn).step("prefill", tokens, tokens).step_s
    monkeypatch.setattr(CostModel, "elementwise", lambda self, nbytes: 0.0)
    without = PhaseModel(QWEN, c, CostModel(c), lay, kn).step("prefill", tokens, tokens).step_s
    per_token = 48 * (ew.layer_norm_bytes(QWEN) + ew.attention_bytes(QWEN))
    per_token += ew.final_norm_bytes(QWEN)
    expect = tokens * per_token / (c.gpu.mem_bw * DEFAULT_BW_EFF)
    assert with_ew - without == pytest.approx(expect, rel=1e-9)


def test_iteration_and_phase_models_agree_on_the_passes(monkeypatch):
    """The serving path's iteration (:class:`IterationModel`) adds the same seconds as the
    phase step for one 8,192-token prompt."""
    c = load_cluster("h200-sxm-8")
    lay = Layout()

    def step(pm: bool) -> float:
        cm = CostModel(c)
        if pm:
            return PhaseModel(QWEN, c, cm, lay, InstanceKnobs()).step("prefill", 8192, 8192).step_s
        return IterationModel(QWEN, c, cm, lay)(Batch(0, 0, ((8192, 8192),)))

    a, b = step(True), step(False)
    monkeypatch.setattr(CostModel, "elementwise", lambda self, nbytes: 0.0)
    assert a - step(True) == pytest.approx(b - step(False), rel=1e-9)
