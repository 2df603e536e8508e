"""Calibration: fit GEMM and NCCL models to measured latencies (pure; arrays in, profile out).

Inputs are NVIDIA's measurement tables (``moeplan/data/measured/<gpu>/``, from
ai-dynamo/aiconfigurator; read by :mod:`moeplan.measured`): GEMM latency by ``(m, n, k)``
for bf16, and NCCL latency of ``all_gather``, ``all_reduce``, ``alltoall``,
``reduce_scatter`` by ``(num_gpus, message_size)`` in one NVSwitch node. Latencies arrive in
milliseconds and message sizes as element counts; both are converted (seconds; bytes =
elements x dtype size, half = 2 bytes, int8 = 1 byte).

Method: a seeded random 20 % of rows is held out; each model is fitted on the rest and
scored on the held-out rows (median and p90 absolute percentage error, as fractions).

- GEMM: :class:`Roofline` ``alpha + max(padded FLOPs / F, bytes / B)`` fitted on log time.
  One straight line cannot fit because small-m GEMMs are memory-bound and large ones
  compute-bound, and m is padded to the 64-row tile.
- NCCL: one :class:`Piecewise` α-β (up to three segments) per ``(op, num_gpus)``, fitted
  on both dtypes' rows (bytes are what the wire carries). NCCL switches protocol (LL, LL128,
  Simple) and algorithm with size, which one line cannot follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from moeplan.cost.linear import FitQuality, Piecewise, Roofline, quality
from moeplan.cost.profile import CommModel, HardwareProfile

#: op name in a measured collective table -> the collective it times
MEASURED_OPS = {
    "all_gather": "all_gather",
    "all_reduce": "all_reduce",
    "alltoall": "all_to_all",
    "reduce_scatter": "reduce_scatter",
}
DTYPE_BYTES = {"half": 2, "bfloat16": 2, "float16": 2, "int8": 1, "float": 4, "float32": 4}


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmRows:
    """bf16 GEMM measurements: shapes and latency in seconds."""

    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    latency: np.ndarray


@dataclass(frozen=True, kw_only=True, slots=True)
class NcclRows:
    """NCCL measurements: op (our name), group size, message bytes, latency in seconds."""

    op: np.ndarray
    num_gpus: np.ndarray
    nbytes: np.ndarray
    latency: np.ndarray


@dataclass(frozen=True, kw_only=True, slots=True)
class FitRow:
    """One fitted model's quality, as ``moeplan calibrate`` reports it."""

    op: str
    num_gpus: int
    quality: FitQuality
    scope: str = ""


def heldout_mask(n: int, seed: int = 0, frac: float = 0.2) -> np.ndarray:
    """Boolean mask of held-out rows: a seeded random ``frac`` of ``n``."""
    rng = np.random.default_rng(seed)
    return rng.random(n) < frac


def fit_gemm(rows: GemmRows, seed: int = 0) -> tuple[Roofline, list[FitRow]]:
    """Fit the GEMM roofline; report quality on all rows and on ``m*n*k >= 2**30``."""
    test = heldout_mask(len(rows.latency), seed)
    fit = ~test
    model = Roofline.fit(rows.m[fit], rows.n[fit], rows.k[fit], rows.latency[fit])
    pred = model.predict(rows.m, rows.n, rows.k)
    big = rows.m * rows.n * rows.k >= 2.0**30
    out = [
        FitRow(
            op="gemm",
            num_gpus=1,
            scope="all shapes",
            quality=quality(pred[fit], rows.latency[fit], pred[test], rows.latency[test]),
        ),
        FitRow(
            op="gemm",
            num_gpus=1,
            scope="m*n*k >= 2^30",
            quality=quality(
                pred[fit & big], rows.latency[fit & big], pred[test & big], rows.latency[test & big]
            ),
        ),
    ]
    return model, out


def fit_nccl(rows: NcclRows, seed: int = 0) -> tuple[dict[str, dict[int, Piecewise]], list[FitRow]]:
    """Fit one piecewise α-β per (op, num_gpus) on bytes; held-out quality per fit."""
    test = heldout_mask(len(rows.latency), seed + 1)
    models: dict[str, dict[int, Piecewise]] = {}
    report = []
    for op in sorted(set(rows.op.tolist())):
        for n in sorted(set(rows.num_gpus[rows.op == op].tolist())):
            sel = (rows.op == op) & (rows.num_gpus == n)
            f, t = sel & ~test, sel & test
            model = Piecewise.fit(rows.nbytes[f], rows.latency[f])
            models.setdefault(op, {})[int(n)] = model
            q = quality(
                model.predict(rows.nbytes[f]),
                rows.latency[f],
                model.predict(rows.nbytes[t]),
                rows.latency[t],
            )
            report.append(FitRow(op=op, num_gpus=int(n), quality=q))
    return models, report


def calibrate(
    name: str, source: str, gemm: GemmRows, nccl: NcclRows, seed: int = 0
) -> tuple[HardwareProfile, list[FitRow]]:
    """Fit every model and return the profile with its fit report."""
    gemm_model, gemm_report = fit_gemm(gemm, seed)
    colls, nccl_report = fit_nccl(nccl, seed)
    report = gemm_report + nccl_report
    qual = {"gemm": gemm_report[0].quality, "gemm/large": gemm_report[1].quality}
    qual.update({f"{r.op}/{r.num_gpus}": r.quality for r in nccl_report})
    collectives = cast("dict[str, dict[int, CommModel]]", colls)  # Piecewise is a CommModel
    profile = HardwareProfile(
        name=name, source=source, gemm=gemm_model, collectives=collectives, quality=qual
    )
    return profile, report


def kernel_calibration(
    db,
    ops: list[str] | None = None,
    seed: int = 0,
    max_folds: int | None = None,
    others: list | None = None,
):
    """Held-out evaluation of the kernel database (:mod:`moeplan.cost.kerneldb.evaluate`):
    per GPU x engine x op x regime rows, and the per-source error table it ships. ``others``:
    ``(Device, [KernelTable])`` of GPUs measured outside NVIDIA's tables (InferSim's H20),
    predicted from their reference table GPU (:mod:`~moeplan.cost.kerneldb.evaluate_other`)."""
    from moeplan.cost.kerneldb.evaluate import error_table, evaluate_all, summarize
    from moeplan.cost.kerneldb.evaluate_other import other_gpus

    scored = evaluate_all(db, ops, seed=seed, max_folds=max_folds)
    if others:
        keep = [(d, [t for t in ts if ops is None or t.op in ops]) for d, ts in others]
        scored += other_gpus(db, keep)
    rows = summarize(scored)
    return rows, error_table(rows)
