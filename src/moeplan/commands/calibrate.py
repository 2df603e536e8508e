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
    evaluating the kernel database (``--kernels``: ``--op``, ``--folds``, ``--errors-out``,
    ``--test-fold``).
    A flag of another mode is refused, not ignored. ``given``: flag -> whether it was given
    (``--measured``: a set other than the default)."""
    on = {flag for flag, value in given.items() if value}
    if kernels:
        fit = [f for f in ("--device", "--quick", "--name", "--out", "--measured") if f in on]
        fit = fit if device is None else ["--device", *fit]
        if fit:
            raise MoeplanError(f"{', '.join(fit)} fit a profile; --kernels evaluates the "
                               "kernel database (give one or the other)")  # fmt: skip
        if "--test-fold" in on and "--folds" in on:
            raise MoeplanError("--folds splits the development tables; --test-fold scores the "
                               "frozen test fold (give one or the other)")  # fmt: skip
        return
    if on & {"--op", "--folds", "--errors-out", "--test-fold"}:
        raise MoeplanError("--op, --folds, --errors-out and --test-fold need --kernels")
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


def fold_test_errors(
    ops: list[str] | None,
) -> tuple[list[Any], dict[str, Any], list[dict[str, Any]]]:
    """``--kernels --test-fold``: the final test error of the kernel database on the frozen
    test fold of the B200 and GB200 tables, per GPU x engine x op x dtype
    (:mod:`moeplan.cost.kerneldb.evaluate_test`), the shipped leave-one-GPU-out errors
    stated for GPUs that borrow those tables (``gpu_transfer.json``), and the error each
    frozen table's prices state (:func:`~moeplan.cost.kerneldb.evaluate_test.stated_errors`,
    shipped as ``frozen_test_errors.json`` by ``--errors-out``)."""
    import json

    from moeplan.cost.kerneldb import OPS
    from moeplan.cost.kerneldb.db import REFERENCE_ORDER
    from moeplan.cost.kerneldb.evaluate_test import (
        cells,
        fold_scores,
        proxy_errors,
        stated_errors,
    )
    from moeplan.cost.kerneldb.frozen_fold import FROZEN_GPUS
    from moeplan.kernel_tables import (
        ERRORS_FILE,
        frozen_fold_loaders,
        gpu_transfer_path,
        kernel_db,
        kernels_dir,
        read_errors,
        table_devices,
    )

    for o in ops or []:
        if o not in OPS:
            raise MoeplanError(f"op ({o!r}) must be one of {', '.join(OPS)}")
    loaders = frozen_fold_loaders()
    tests = [load() for k, load in sorted(loaders.items()) if ops is None or k[2] in ops]
    db = kernel_db()
    scored = fold_scores(db, table_devices(), tests)
    path = gpu_transfer_path()
    transfer = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    stated = stated_errors(scored)
    if ops is None:  # every frozen table states an error: its own fold's, or a proxy's
        frozen = [k for k in db.tables if k[0] in FROZEN_GPUS]
        stated += proxy_errors(frozen, stated, read_errors(kernels_dir() / ERRORS_FILE),
                               REFERENCE_ORDER)  # fmt: skip
    return cells(scored), transfer, stated


def fold_test_tables(cells: list[Any], transfer: dict[str, Any]) -> list[tuple[str, tuple, list]]:
    """(title, columns, rows of texts) of ``--kernels --test-fold``'s printed tables."""
    from moeplan.cost.kerneldb.evaluate_test import MEDIAN_TARGET, MIN_ROWS, MIN_SHAPES, P90_TARGET

    title = (f"Kernel database error on the frozen test fold (|priced/measured - 1|; target "
             f"median <= {MEDIAN_TARGET:.0%}, p90 <= {P90_TARGET:.0%} where rows >= {MIN_ROWS} "
             f"of >= {MIN_SHAPES} shapes)")  # fmt: skip
    rows = [
        (c.gpu, c.engine, c.op, c.dtype, str(c.rows), str(c.shapes), f"{c.median:.1%}",
         f"{c.p90:.1%}", ("met" if c.met else "MISSED") if c.judged else "too few rows")
        for c in cells
    ]  # fmt: skip
    out = [(title, ("GPU", "engine", "op", "dtype", "rows", "shapes", "median", "p90", "target"),
            rows)]  # fmt: skip
    stated = [
        (r["reference"], r["measured_as"], r["op"], str(r["rows"]), f"{r['median']:.1%}",
         f"{r['p90']:.1%}")
        for r in transfer.get("stated", []) if r["engine"] == "all"
    ]  # fmt: skip
    if stated:
        out.append(("Leave-one-GPU-out error stated beside prices transferred from a Blackwell "
                    "table GPU (gpu_transfer.json, pooled over engines)",
                    ("borrowing from", "measured as", "op", "rows", "median", "p90"), stated))  # fmt: skip
    return out
