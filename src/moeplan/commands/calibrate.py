"""``moeplan calibrate``'s answers: the cost models fitted to a measurement set with their
fit quality per operation, and the kernel database's held-out error per regime.
"""

from __future__ import annotations

import math
from typing import Any

from moeplan.cost.calibrate import calibrate as fit_all
from moeplan.errors import MoeplanError
from moeplan.measured import read_gemm, read_nccl


def check_mode(kernels: bool, device: str | None, given: dict[str, Any]) -> None:
    """``calibrate``'s three modes each read their own flags: fitting NVIDIA's tables,
    measuring this machine (``--device``: ``--quick``, ``--name``, ``--rows-out``) and
    evaluating the kernel database (``--kernels``: ``--op``, ``--folds``, ``--errors-out``).
    A flag of another mode is refused, not ignored. ``given``: flag -> whether it was given
    (``--measured``: a set other than the default)."""
    on = {flag for flag, value in given.items() if value}
    if kernels:
        fit = [f for f in ("--device", "--quick", "--name", "--out", "--measured") if f in on]
        fit = fit if device is None else ["--device", *fit]
        if fit:
            raise MoeplanError(f"{', '.join(fit)} fit a profile; --kernels evaluates the "
                               "kernel database (give one or the other)")  # fmt: skip
        return
    if on & {"--op", "--folds", "--errors-out"}:
        raise MoeplanError("--op, --folds and --errors-out need --kernels")
    measuring = [f for f in ("--rows-out", "--quick", "--name") if f in on]
    if measuring and device is None:
        verb = "needs" if len(measuring) == 1 else "need"
        raise MoeplanError(f"{', '.join(measuring)} {verb} --device")


def fit_measured(measured: str, seed: int) -> tuple[Any, list[Any]]:
    """The HardwareProfile fitted to the shipped measurement set ``measured`` (or a folder)
    and its fit reports (20 % of rows held out, ``seed``)."""
    return fit_all(
        measured,
        f"moeplan calibrate --measured {measured} --seed {seed}",
        read_gemm(measured),
        read_nccl(measured),
        seed=seed,
    )


def fit_rows(report: list[Any]) -> list[dict[str, Any]]:
    """One ``--json`` row per fit: R² (None when not finite) and held-out errors."""
    return [
        {
            "op": r.op,
            "num_gpus": r.num_gpus,
            "scope": r.scope or "all sizes",
            "r2": _num(r.quality.r2),
            "heldout_median_ape": r.quality.heldout_median_ape,
            "heldout_p90_ape": r.quality.heldout_p90_ape,
            "n_fit": r.quality.n_fit,
            "n_heldout": r.quality.n_heldout,
        }
        for r in report
    ]


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def kernel_errors(
    ops: list[str] | None, seed: int, folds: int | None
) -> tuple[list[Any], dict[str, Any]]:
    """``--kernels``: the kernel database's held-out error rows per regime and the error
    table by source (whole shapes held out, leave-one-GPU-out, datasheet roofline)."""
    from moeplan.cost.calibrate import kernel_calibration
    from moeplan.cost.kerneldb import OPS
    from moeplan.kernel_tables import kernel_db

    for o in ops or []:
        if o not in OPS:
            raise MoeplanError(f"op ({o!r}) must be one of {', '.join(OPS)}")
    if folds is not None and folds < 1:
        raise MoeplanError(f"folds ({folds}) must be >= 1")
    from moeplan.cost.kerneldb import device_for
    from moeplan.infersim_tables import CLUSTER, DSA_CLUSTER, dsa_tables, gdn_tables
    from moeplan.specs import load_cluster

    others = [  # InferSim's H20 GDN and H800 sparse-attention rows
        (device_for(load_cluster(CLUSTER)), gdn_tables()),
        (device_for(load_cluster(DSA_CLUSTER)), dsa_tables()),
    ]
    return kernel_calibration(kernel_db(), ops, seed=seed, max_folds=folds, others=others)
