"""Calibration against NVIDIA's measured tables: the acceptance bars, and fits that recover truth."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from moeplan.cost import load_profile
from moeplan.cost.calibrate import calibrate
from moeplan.cost.linear import AlphaBeta, Piecewise, Roofline
from moeplan.measured import read_gemm, read_nccl


@pytest.fixture(scope="module", params=["h100_sxm", "a100_sxm", "h200_sxm"])
def report(request):
    g = request.param
    return g, calibrate(g, "test", read_gemm(g), read_nccl(g))[1]


def test_nccl_heldout_median_error_within_10_percent(report):
    gpu, rows = report
    nccl = [r for r in rows if r.op != "gemm"]
    assert len(nccl) == 12  # 4 ops x {2, 4, 8} GPUs
    for r in nccl:
        assert r.quality.heldout_median_ape <= 0.10, (gpu, r.op, r.num_gpus, r.quality)
        assert r.quality.r2 > 0.97


def test_gemm_heldout_median_error_within_15_percent_for_large_gemms(report):
    gpu, rows = report
    big = next(r for r in rows if r.op == "gemm" and "2^30" in r.scope)
    assert big.quality.heldout_median_ape <= 0.15, (gpu, big.quality)
    assert big.quality.n_heldout > 100


def test_alpha_beta_fit_recovers_exact_line():
    x = np.geomspace(1e3, 1e9, 40)
    fit = AlphaBeta.fit(x, 2e-5 + 3e-11 * x)
    assert fit.alpha == pytest.approx(2e-5, rel=1e-6)
    assert fit.beta == pytest.approx(3e-11, rel=1e-6)


def test_piecewise_fit_finds_the_regime_change():
    x = np.geomspace(1e3, 1e9, 60)
    y = np.where(x < 1e6, 1e-5 + 1e-12 * x, 5e-6 + 2e-11 * x)
    fit = Piecewise.fit(x, y)
    assert np.max(np.abs(fit.predict(x) / y - 1)) < 1e-6
    assert len(fit.segments) >= 2


def test_roofline_fit_recovers_parameters():
    rng = np.random.default_rng(1)
    m, n, k = (2.0 ** rng.integers(0, 14, 300) for _ in range(3))
    true = Roofline(alpha=4e-6, flops=6e14, bw=2e12)
    fit = Roofline.fit(m, n, k, true.predict(m, n, k))
    assert fit.flops == pytest.approx(6e14, rel=1e-3)
    assert fit.bw == pytest.approx(2e12, rel=1e-3)


#: Least-squares fits differ around 1e-11 (relative) between BLAS builds and CPUs.
FIT_RTOL = 1e-6
_SIZES = np.geomspace(1.0, 1e11, 45)  # bytes / FLOPs: every regime of every model
_DIMS = 2.0 ** np.arange(0, 17, 2)  # GEMM m, n, k


def _assert_same_model(got: Any, want: Any, where: str) -> None:
    """Same kind and breakpoints, same predictions within FIT_RTOL everywhere.

    Predictions, not coefficients: an NNLS coefficient pinned at 0.0 by one build can be
    1e-25 on another, which is the same model.
    """
    assert type(got) is type(want), where
    if isinstance(want, Roofline):
        m, n, k = (a.ravel() for a in np.meshgrid(_DIMS, _DIMS, _DIMS))
        assert got.tile_m == want.tile_m, where
        assert got.predict(m, n, k) == pytest.approx(want.predict(m, n, k), rel=FIT_RTOL), where
        return
    if isinstance(want, Piecewise):
        assert got.breaks == pytest.approx(want.breaks, rel=FIT_RTOL), where
    assert got.predict(_SIZES) == pytest.approx(want.predict(_SIZES), rel=FIT_RTOL), where


def test_shipped_profiles_match_a_fresh_fit():
    fresh, _ = calibrate("h100_sxm", "test", read_gemm("h100_sxm"), read_nccl("h100_sxm"))
    shipped = load_profile("h100_sxm")
    _assert_same_model(shipped.gemm, fresh.gemm, "gemm")
    assert shipped.collectives.keys() == fresh.collectives.keys()
    for op, by_n in fresh.collectives.items():
        assert shipped.collectives[op].keys() == by_n.keys(), op
        for n, model in by_n.items():
            _assert_same_model(shipped.collectives[op][n], model, f"{op}/{n}")


def test_model_comparison_tolerates_rounding_but_not_a_different_fit():
    """The comparison above: 1e-11 relative noise passes; a 1e-4 change or a new kind fails."""
    ab = AlphaBeta(alpha=2e-5, beta=3e-11)
    _assert_same_model(AlphaBeta(alpha=2e-5 * (1 + 1e-11), beta=3e-11 * (1 - 1e-11)), ab, "x")
    _assert_same_model(AlphaBeta(alpha=2e-5, beta=1e-30), AlphaBeta(alpha=2e-5, beta=0.0), "x")
    with pytest.raises(AssertionError):
        _assert_same_model(AlphaBeta(alpha=2e-5, beta=3e-11 * (1 + 1e-4)), ab, "x")
    with pytest.raises(AssertionError):
        _assert_same_model(Piecewise(segments=(ab,)), ab, "x")
    roof = Roofline(alpha=4e-6, flops=6e14, bw=2e12)
    with pytest.raises(AssertionError):
        _assert_same_model(Roofline(alpha=4e-6, flops=6e14 * (1 + 1e-4), bw=2e12), roof, "x")


def test_findep_profile_is_the_papers_fig7_in_seconds():
    p = load_profile("findep-a")
    assert p.gemm.alpha == pytest.approx(0.17e-3)
    assert p.gemm(1e9) == pytest.approx(0.17e-3 + 8.59e-11 * 1e-3 * 1e9)
    assert p.attention is not None and p.attention.alpha == pytest.approx(0.15e-3)
    assert set(p.a2e) == {(1, 7), (2, 6), (4, 4)}
