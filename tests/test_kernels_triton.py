"""Triton kernels vs the torch reference on CUDA (skipped where CUDA or Triton is missing)."""

from __future__ import annotations

import importlib.util
import unittest

import pytest
import torch

from moeplan.runtime import kernels as K
from moeplan.runtime.layers import permute as ref

HAVE = torch.cuda.is_available() and importlib.util.find_spec("triton") is not None
pytestmark = pytest.mark.skipif(not HAVE, reason="needs CUDA and Triton")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


@unittest.skipUnless(HAVE, "needs CUDA and Triton")
class TritonKernels(unittest.TestCase):
    def _ids(self, t: int, k: int, e: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, e, (t, k), generator=g)
        ids[torch.rand(t, k, generator=g) < 0.3] = -1
        return ids, torch.rand(t, k, generator=g)

    def test_triton_is_used(self):
        self.assertTrue(K.triton_enabled(torch.zeros(1, device="cuda")))

    def test_permute(self):
        for t, k, e in ((1, 1, 1), (1000, 8, 256), (4097, 6, 160), (300, 4, 384)):
            ids, w = self._ids(t, k, e, t)
            a, b = K.permute(ids.cuda(), w.cuda(), e), ref.permute(ids, w, e)
            for f in ("token_index", "expert", "weight", "counts", "inverse"):
                self.assertTrue(torch.equal(getattr(a, f).cpu(), getattr(b, f)), f)

    def test_runtime_permute_uses_kernels_on_cuda(self):
        """The runtime's permute on a CUDA tensor (kernel path) equals its CPU path."""
        ids, w = self._ids(5000, 8, 160, 4)
        a, b = ref.permute(ids.cuda(), w.cuda(), 160), ref.permute(ids, w, 160)
        for f in ("token_index", "expert", "weight", "counts", "inverse"):
            self.assertTrue(torch.equal(getattr(a, f).cpu(), getattr(b, f)), f)

    def test_gather_combine(self):
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
            ids, w = self._ids(2000, 8, 64, 1)
            x = torch.randn(2000, 576).to(dtype)
            perm = ref.permute(ids, w, 64)
            pc = K.permute(ids.cuda(), w.cuda(), 64)
            rows = K.gather_rows(x.cuda(), pc)
            self.assertTrue(torch.equal(rows.cpu(), ref.gather_rows(x, perm)))
            got = K.combine(rows, pc).cpu()
            self.assertLessEqual(
                _rel(got, ref.combine(ref.gather_rows(x, perm).float(), perm)), tol
            )

    def test_grouped_moe_bf16(self):
        ids, w = self._ids(4096, 8, 32, 2)
        x = torch.randn(4096, 256)
        g = torch.Generator().manual_seed(3)
        ws = [
            torch.randn(*s, generator=g) / s[-2] ** 0.5
            for s in ((32, 256, 128), (32, 256, 128), (32, 128, 256))
        ]
        want = K.grouped_moe(x, ids, w, *ws)  # fp32 CPU fallback, itself tested vs runtime
        got = K.grouped_moe(
            x.cuda().bfloat16(), ids.cuda(), w.cuda(), *[t.cuda().bfloat16() for t in ws]
        )
        self.assertLessEqual(_rel(got.cpu(), want), 1e-2)

    def test_grouped_moe_variable_k_and_cuda_graph(self):
        """The sync-free path with ``-1`` pads (dynamic top-k) and empty experts; captured in
        a CUDA graph, replays give the eager result."""
        ids, w = self._ids(3000, 6, 64, 5)
        ids[::3, 2:] = -1  # a third of the tokens keep 2 experts
        ids[7] = -1  # a token with none
        x = torch.randn(3000, 256)
        g = torch.Generator().manual_seed(4)
        ws = [
            torch.randn(*s, generator=g) / s[-2] ** 0.5
            for s in ((64, 256, 128), (64, 256, 128), (64, 128, 256))
        ]
        want = K.grouped_moe(x, ids, w, *ws)
        args = (x.cuda().bfloat16(), ids.cuda(), w.cuda(), *[t.cuda().bfloat16() for t in ws])
        got = K.grouped_moe(*args)
        self.assertLessEqual(_rel(got.cpu(), want), 1e-2)
        self.assertTrue(bool((got[7] == 0).all()))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            K.grouped_moe(*args)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = K.grouped_moe(*args)
        graph.replay()
        torch.cuda.synchronize()
        self.assertLessEqual(_rel(out.cpu(), got.cpu()), 1e-6)
