"""Kernels' torch paths vs the runtime reference (moeplan.runtime.layers) on random inputs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.runtime import kernels as K
from moeplan.runtime.kernels import loop_moe
from moeplan.runtime.kernels.positions import stable_positions_torch
from moeplan.runtime.layers import moe as ref_layer
from moeplan.runtime.layers import permute as ref


def _routing(seed: int, t: int, k: int, e: int, pad: float) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, e, (t, k), generator=g)
    ids[torch.rand(t, k, generator=g) < pad] = -1
    return ids, torch.rand(t, k, generator=g)


@settings(max_examples=examples(60), deadline=None)
@given(
    seed=st.integers(0, 2**16),
    t=st.integers(0, 40),
    k=st.integers(1, 6),
    e=st.sampled_from([1, 3, 8, 64, 65, 160]),
    pad=st.floats(0, 1),
)
def test_permute_equals_reference(seed, t, k, e, pad):
    """Every field of the permutation equals the reference, for any k and pad pattern."""
    ids, w = _routing(seed, t, k, e, pad)
    a, b = K.permute(ids, w, e), ref.permute(ids, w, e)
    for field in ("token_index", "expert", "weight", "counts", "inverse"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert a.num_tokens == b.num_tokens


@pytest.mark.parametrize("bins", [2, 64, 65, 300])
def test_positions_are_a_stable_sort(bins):
    """The torch backend gives each valid key its rank in the stable sort, pads -1."""
    keys = torch.randint(-1, bins, (500,), generator=torch.Generator().manual_seed(bins))
    pos, counts = stable_positions_torch(keys, bins)
    valid = keys >= 0
    expect = torch.empty(int(valid.sum()), dtype=torch.long)
    expect[torch.argsort(keys[valid], stable=True)] = torch.arange(expect.numel())
    assert torch.equal(pos[valid], expect)
    assert bool((pos[~valid] == -1).all())
    assert torch.equal(counts, torch.bincount(keys[valid], minlength=bins))


def _weights(seed: int, e: int, h: int, i: int, dtype: torch.dtype):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(*s, generator=g) / s[-2] ** 0.5).to(dtype)
        for s in ((e, h, i), (e, h, i), (e, i, h))
    ]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("pad", [0.0, 0.4])
def test_grouped_moe_matches_reference(dtype, tol, pad):
    """permute + gather + grouped SwiGLU + combine == runtime reference (fp32 1e-5, bf16 1e-2)."""
    e, h, i = 16, 64, 48
    ids, w = _routing(7, 300, 4, e, pad)
    x = torch.randn(300, h, generator=torch.Generator().manual_seed(1)).to(dtype)
    wg, wu, wd = _weights(2, e, h, i, dtype)
    got = K.grouped_moe(x, ids, w, wg, wu, wd)
    perm = ref.permute(ids, w, e)
    rows = ref_layer.grouped_swiglu(
        ref.gather_rows(x, perm), perm.counts, wg, wu, wd, method="segment"
    )
    assert _rel(got, ref.combine(rows, perm)) <= tol


def test_loop_baseline_matches_grouped():
    """The per-expert loop used as the benchmark baseline computes the same layer."""
    ids, w = _routing(3, 200, 3, 8, 0.2)
    x = torch.randn(200, 32, generator=torch.Generator().manual_seed(4))
    ws = _weights(5, 8, 32, 24, torch.float32)
    assert _rel(loop_moe(x, ids, w, *ws), K.grouped_moe(x, ids, w, *ws)) <= 1e-5


@pytest.mark.parametrize("weighted", [True, False])
def test_combine_inverts_gather(weighted):
    """combine(gather(x)) == reference combine, weighted and unweighted."""
    ids, w = _routing(11, 120, 5, 20, 0.3)
    x = torch.randn(120, 40, generator=torch.Generator().manual_seed(12))
    perm = ref.permute(ids, w, 20)
    rows = K.gather_rows(x, perm)
    assert torch.equal(rows, ref.gather_rows(x, perm))
    assert (
        _rel(K.combine(rows, perm, weighted=weighted), ref.combine(rows, perm, weighted=weighted))
        <= 1e-6
    )


def test_empty_routing():
    """All slots padded: no rows, zero output."""
    ids = torch.full((5, 2), -1)
    w = torch.zeros(5, 2)
    x = torch.randn(5, 8)
    out = K.grouped_moe(x, ids, w, *_weights(0, 4, 8, 8, torch.float32))
    assert torch.equal(out, torch.zeros_like(x))
