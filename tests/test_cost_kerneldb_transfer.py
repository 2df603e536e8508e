"""The kernel database's GPU-to-GPU transfer rule against a same-kernel pair of GPUs.

NVIDIA's GEMM tables for H100 and H200 come from the same TensorRT-LLM build (1.3.0rc20) at
the same 100,668 shapes: the only change is the GPU (same SMs and clock, 1.43x the HBM
bandwidth). :meth:`Analytic.scaled` must move a model fitted on the H100 so that its *change*
per shape matches the measured change (H200 / H100 latency), in each regime: few-microsecond
kernels (floor-bound: unchanged), weight-read-bound GEMVs (bandwidth-bound: 1 / 1.43) and
large compute-bound GEMMs (same FLOP/s: unchanged). Comparing ratios isolates the transfer
rule from the fit's own error on the H100.
"""

from __future__ import annotations

import numpy as np
import pytest

from moeplan.cost.kerneldb.base import Features
from moeplan.cost.kerneldb.device import device_for
from moeplan.cost.kerneldb.fit import Analytic
from moeplan.measured import read_gemm
from moeplan.specs import load_cluster


def _features(m: np.ndarray, n: np.ndarray, k: np.ndarray) -> Features:
    return Features(
        flops=2 * m * n * k,
        nbytes=2.0 * (m * k + k * n + m * n),
        work=np.zeros_like(m),
        fp8=np.zeros(len(m), bool),
        tokens=m,
        coords=np.log2(np.stack([m, n, k], 1)),
    )


@pytest.fixture(scope="module")
def paired():
    a, b = read_gemm("h100_sxm"), read_gemm("h200_sxm")
    key_b = {(x, y, z): t for x, y, z, t in zip(b.m, b.n, b.k, b.latency, strict=True)}
    keep = [i for i, key in enumerate(zip(a.m, a.n, a.k, strict=True)) if key in key_b]
    m, n, k = a.m[keep], a.n[keep], a.k[keep]
    h200 = np.array([key_b[key] for key in zip(m, n, k, strict=True)])
    return _features(m, n, k), a.latency[keep], h200


def test_h100_to_h200_change_per_shape_matches_the_tables(paired) -> None:
    f, h100, h200 = paired
    src, dst = device_for(load_cluster("h100-sxm-8")), device_for(load_cluster("h200-sxm-8"))
    model = Analytic.fit(f, h100, src, link=False)
    moved = model.scaled(src, dst, link=False)
    predicted = moved.predict(f, dst, link=False) / model.predict(f, src, link=False)
    measured = h200 / h100
    bytes_per_s = f.nbytes / h100
    regimes = {
        "floor-bound (< 6 us)": h100 < 6e-6,
        "weight-read-bound (> 2.3 TB/s on the H100)": bytes_per_s > 2.3e12,
        "compute-bound (> 500 TFLOP/s on the H100)": f.flops / h100 > 5e14,
    }
    for name, sel in regimes.items():
        assert sel.sum() > 200, name
        off = np.median(predicted[sel]) / np.median(measured[sel]) - 1
        assert abs(off) <= 0.05, f"{name}: predicted change off by {off:+.1%}"
    assert float(np.median(np.abs(predicted / measured - 1))) <= 0.06


def test_floor_follows_the_sm_clock() -> None:
    """A100 (1410 MHz) -> H100 (1980 MHz): the floor shrinks by the clock ratio; an H200
    (same clock as the H100) keeps it; a GPU without a clock figure keeps its reference's."""
    a100, h100, h200, h20 = (
        device_for(load_cluster(c)) for c in ("a100-sxm-8", "h100-sxm-8", "h200-sxm-8", "findep-c")
    )
    m = Analytic(floor=10e-6, per_work=1e-9, flops_eff=0.5, bw_eff=0.8)
    assert m.scaled(a100, h100, link=False).floor == pytest.approx(10e-6 * 1410 / 1980)
    assert m.scaled(h100, h200, link=False).floor == pytest.approx(10e-6)
    assert h20.sm_clock_mhz is None  # no published figure (its GPU record says so)
    assert m.scaled(h100, h20, link=False).floor == pytest.approx(10e-6)
    assert m.scaled(h100, h200, link=False).per_work == pytest.approx(
        1e-9 * h100.mem_bw / h200.mem_bw
    )
