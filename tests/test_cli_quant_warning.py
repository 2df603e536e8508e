"""The warning when a quantized checkpoint's experts are priced slower than bf16 by the
engine's own fused-MoE table. Oracle: NVIDIA's measured SGLang rows on H100 for GPT-OSS-120B's
expert shape (hidden 2880, intermediate 2880, 128 experts, top-4) at 64 tokens on one GPU:
w4a16_mxfp4 2.22 ms, bf16 2.15 ms."""

from __future__ import annotations

import re

import pytest

from moeplan.cli.quant_warning import quant_slower_warning
from moeplan.specs import load_cluster, load_model


def test_mxfp4_slower_than_bf16_is_said_and_names_the_table():
    w = quant_slower_warning(load_model("gpt-oss-120b"), load_cluster("h100-sxm-8"), "sglang")
    assert w is not None
    assert "w4a16_mxfp4" in w and "h100_sxm/sglang/moe" in w and "(measured)" in w
    q, b = map(float, re.search(r"64 tokens: ([\d.]+) vs ([\d.]+) ms", w).groups())
    assert q == pytest.approx(2.22, abs=0.01) and b == pytest.approx(2.15, abs=0.01)


def test_no_warning_for_bf16_experts_or_without_engine_tables():
    h100 = load_cluster("h100-sxm-8")
    assert quant_slower_warning(load_model("mixtral-8x7b"), h100, "sglang") is None
    assert quant_slower_warning(load_model("gpt-oss-120b"), h100, None) is None
