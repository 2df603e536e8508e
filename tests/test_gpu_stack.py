"""The GPU session's whole-stack model (``bench/gpu_stack.py``) computes what it claims.

Its decode step (KV cache, query heads packed per KV head, RoPE at the last position) must
give the logits its prefill gives for the prompt's last token — an independent path through
the same weights. Run on the CPU in float32 at reduced widths; the GPU session repeats the
check in bf16 at full width (``decode_vs_prefill_rel_err`` in ``stack.json``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import gpu_stack  # noqa: E402


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "mixtral-8x7b"])
def test_decode_over_the_cache_equals_the_prefill(model: str) -> None:
    torch.manual_seed(0)
    st = gpu_stack.Stack(model, torch.device("cpu"), scale=16, layers=2, dtype=torch.float32)
    assert st.check_decode(24) < 1e-4


def test_a_wrong_cache_position_is_caught() -> None:
    """The check can fail: a cache one token short changes the last token's attention."""
    torch.manual_seed(0)
    st = gpu_stack.Stack("qwen3-30b-a3b", torch.device("cpu"), scale=16, layers=2,
                         dtype=torch.float32)  # fmt: skip
    ids = torch.randint(0, st.s.vocab, (24,))
    ref, cache = st.prefill_cache(ids, st.rope(torch.arange(24)))
    short = [(k[:, :, 1:].contiguous(), v[:, :, 1:].contiguous()) for k, v in cache]
    got = st.decode_step(ids[-1:], short, st.rope(torch.full((1,), 23)))
    assert float((got - ref).norm() / ref.norm()) > 1e-3


def test_wide_shard_rows_are_balanced() -> None:
    """A wide-EP shard's copies are spread evenly over the local experts (the table rows'
    "uniform" load) and its FLOPs are the three GEMMs'."""
    row = gpu_stack.wide_row(3, 10, torch.device("cpu"), 32, 16, 8)
    assert row["rows"] == 80
    assert row["flops"] == 6.0 * 80 * 32 * 16
    assert row["runtime_s"] > 0
