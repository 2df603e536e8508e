"""Acceptance bars against NVIDIA's measured tables, whole shapes held out.

Bars: held-out whole shapes, median <= 10 % and p90 <= 25 % for fused MoE, attention
(prefill, decode) and MLA (prefill, decode) on each GPU x engine with tables; DeepEP median
<= 15 %; leave-one-GPU-out median <= 20 % for MoE and attention. Cells that miss a bar are
``xfail(strict=True)`` with the measured figure in the reason: they fail loudly if they start
to pass, and the bar itself is never loosened. The full matrix is ``slow`` (about 4 minutes);
a few cells run in the default suite on one of the five shape folds.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from moeplan.cost.kerneldb.evaluate import heldout_shapes, holdout, leave_one_gpu_out, variant_rows
from moeplan.cost.kerneldb.families import KERNEL_FAMILIES
from moeplan.kernel_tables import kernel_db

MEDIAN, P90, DEEPEP, LOGO = 0.10, 0.25, 0.15, 0.20
GPUS = ("h100_sxm", "a100_sxm")
ENGINES = ("sglang", "vllm", "trtllm")
OPS = (
    "moe",
    "context_attention",
    "generation_attention",
    "context_mla",
    "generation_mla",
    "context_mla_module",
    "generation_mla_module",
)

# (gpu, engine, op) -> measured figure of a cell that misses the held-out bar
MISSES = {
    ("h100_sxm", "trtllm", "moe"): "p90 27.9 % (CUTLASS tactic per shape: bf16 / fp8 rows "
    "p90 66 / 52 %; power-law vs balanced time of one layer and token count spans e^-2.7..e^3.4)",
    ("a100_sxm", "vllm", "generation_mla"): "median 3.5 %, p90 40.3 % (h = 1 runs vLLM's "
    "non-grouped kernel, 4.7x a key; no shape but itself shows it, so a held-out h = 1 is "
    "priced as the grouped kernel)",
    # the H100 vLLM MLA decode cell reads vLLM 0.24.0's tables (the newest shipped); the
    # tail's cause is not examined
    ("h100_sxm", "vllm", "generation_mla"): "median 6.1 %, p90 31.8 %",
}
LOGO_MISSES = {
    ("a100_sxm", "vllm", "moe"): "25.0 % (vLLM 0.14 on A100 vs 0.24 on H100: a near-constant "
    "factor across token regimes)",
    ("h100_sxm", "vllm", "moe"): "25.2 % (the same factor, the other way)",
    ("h100_sxm", "trtllm", "moe"): "23.2 % (non-gated rows predicted from A100's gated kernel; "
    "like-for-like kernels 19.2 %)",
    ("h100_sxm", "sglang", "generation_attention"): "24.6 % (other kernels: FlashAttention 2 "
    "on A100, FA3 and Triton on H100; the FA3 rows alone 23.7 %)",
}


def _cells(misses: dict, ops: tuple[str, ...]):
    db = kernel_db()
    for gpu in GPUS:
        for engine in ENGINES:
            for op in ops:
                if (gpu, engine, op) not in db.tables:
                    continue
                marks = []
                if (gpu, engine, op) in misses:
                    marks.append(
                        pytest.mark.xfail(
                            strict=True, reason=f"bar missed: {misses[(gpu, engine, op)]}"
                        )
                    )
                yield pytest.param(gpu, engine, op, marks=marks, id=f"{gpu}-{engine}-{op}")


@functools.cache
def _shapes(gpu: str, engine: str, op: str, max_folds: int | None):  # type: ignore[no-untyped-def]
    """One held-out evaluation per cell and fold count, shared by the tests that read it."""
    return heldout_shapes(kernel_db(), gpu, engine, op, max_folds=max_folds)


def _heldout_bar(gpu: str, engine: str, op: str, max_folds: int | None) -> None:
    s = _shapes(gpu, engine, op, max_folds)
    assert s is not None and len(s.err) > 100
    med, p90 = float(np.median(s.err)), float(np.percentile(s.err, 90))
    assert med <= MEDIAN and p90 <= P90, f"median {med:.3f}, p90 {p90:.3f}"


@pytest.mark.parametrize(
    ("gpu", "engine", "op"),
    [
        ("a100_sxm", "sglang", "moe"),
        ("h100_sxm", "sglang", "context_mla"),
        ("a100_sxm", "trtllm", "context_attention"),
        ("h100_sxm", "vllm", "generation_mla_module"),
    ],
)
def test_heldout_bar_on_one_fold(gpu: str, engine: str, op: str) -> None:
    _heldout_bar(gpu, engine, op, max_folds=1)


def test_power_law_rows_of_the_expert_load_model() -> None:
    """The busiest-rank load model on the tables' power-law rows, each layer held out with
    its balanced rows (so the load model, not the balanced twin, predicts them)."""
    s = _shapes("a100_sxm", "sglang", "moe", 1)
    assert s is not None
    pl = s.load == "power_law"
    assert pl.sum() > 100 and float(np.median(s.err[pl])) <= MEDIAN


def test_deepep_normal_dispatch_bar() -> None:
    s = heldout_shapes(kernel_db(), "h100_sxm", "sglang", "deepep_normal_dispatch")
    assert s is not None and float(np.median(s.err)) <= DEEPEP


def test_leave_one_gpu_out_context_attention() -> None:
    s = leave_one_gpu_out(kernel_db(), "a100_sxm", "h100_sxm", "sglang", "context_attention")
    assert s is not None and float(np.median(s.err)) <= LOGO


@pytest.mark.slow
@pytest.mark.parametrize(("gpu", "engine", "op"), list(_cells(MISSES, OPS)))
def test_heldout_bar_every_cell(gpu: str, engine: str, op: str) -> None:
    _heldout_bar(gpu, engine, op, max_folds=None)


@pytest.mark.slow
@pytest.mark.parametrize(
    "op",
    ["deepep_normal_dispatch", "deepep_normal_combine", "deepep_ll_dispatch", "deepep_ll_combine"],
)
def test_deepep_bar_every_kernel(op: str) -> None:
    s = heldout_shapes(kernel_db(), "h100_sxm", "sglang", op)
    assert s is not None and float(np.median(s.err)) <= DEEPEP


@pytest.mark.slow
@pytest.mark.parametrize(
    ("gpu", "engine", "op"),
    list(_cells(LOGO_MISSES, ("moe", "context_attention", "generation_attention"))),
)
def test_leave_one_gpu_out_bar_every_cell(gpu: str, engine: str, op: str) -> None:
    other = GPUS[1] if gpu == GPUS[0] else GPUS[0]
    s = leave_one_gpu_out(kernel_db(), other, gpu, engine, op)
    assert s is not None and float(np.median(s.err)) <= LOGO


def _held_out_shapes(gpu: str, engine: str, op: str, key: tuple, pick) -> np.ndarray:
    """Errors of the rows ``pick(columns)`` selects, every token count of those shapes held out
    of the fit and the residual field."""
    db = kernel_db()
    cols, y = variant_rows(db, gpu, engine, op, key)
    test = pick(cols)
    assert 0 < test.sum() < len(y)
    err, _ = holdout(KERNEL_FAMILIES[op], cols, y, test, db.devices[gpu])
    return err


def test_trtllm_decode_falls_back_to_mmha_beyond_group_32() -> None:
    """TRT-LLM decode, query-head groups > 32 (h 96-128 on kv 1-2: 10-15x slower than kv 4)
    held out together: predicted from the MMHA term and the other fallback shapes."""
    err = _held_out_shapes(
        "h100_sxm",
        "trtllm",
        "generation_attention",
        ("torch_flow", "bfloat16", "bfloat16"),
        lambda c: (c["num_heads"] / c["num_key_value_heads"] > 32) & (c["num_heads"] >= 96),
    )
    assert np.median(err) <= MEDIAN and np.percentile(err, 90) <= P90


def test_trtllm_mla_decode_waves_over_the_sms() -> None:
    """A100 TRT-LLM MLA decode with 128 heads (two 64-head blocks per sequence) held out —
    outside the measured head range, so the analytic model alone answers: the serial-key term
    paid per wave of blocks over the 108 SMs keeps it within the p90 bar at the median
    (h = 128 runs the time of h = 64 while ``2 b`` blocks fit on the SMs, up to 1.7x beyond)."""
    err = _held_out_shapes(
        "a100_sxm",
        "trtllm",
        "generation_mla",
        ("default", "bfloat16", "bfloat16"),
        lambda c: c["num_heads"] == 128,
    )
    assert np.median(err) <= P90
