"""Leave-one-GPU-out on a second GPU's measurements outside NVIDIA's tables (InferSim's H20
Gated DeltaNet rows, read by :mod:`moeplan.infersim_tables`).

Every row of the other GPU's table is predicted the way :class:`~.db.KernelDB` predicts a GPU
without tables: the reference table GPU's variant of the same kernel role (convolution or
delta rule: the engine's kernel with most rows), its efficiencies scaled by the other GPU's
datasheet, corrected by the reference's residual field inside its measured box. The errors
are the ``transferred`` source's for that op (:func:`~.evaluate.error_table` folds them into
the ``other`` GPUs' figure).
"""

from __future__ import annotations

import numpy as np

from moeplan.cost.kerneldb.db import KernelDB
from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.evaluate import Scored, _predict
from moeplan.cost.kerneldb.families import FAMILIES
from moeplan.cost.kerneldb.linear_features import is_conv
from moeplan.cost.kerneldb.variant import KernelTable


def other_gpu(db: KernelDB, table: KernelTable, device: Device) -> Scored | None:
    """Errors of ``table``'s rows (one kernel role) predicted from ``device``'s reference."""
    fam, ref = FAMILIES[table.op], device.reference
    conv = bool(is_conv(np.asarray(table.columns["kernel_source"][:1]))[0])
    found = [
        (n, k)
        for k, n in db.variants(ref, table.engine, table.op).items()
        if bool(is_conv(np.array([k[0]]))[0]) == conv
    ]
    if not found or not len(table.latency):
        return None
    vm = db.variant(ref, table.engine, table.op, max(found)[1])
    assert vm is not None
    cols = {c: np.asarray(v) for c, v in table.columns.items() if c in fam.columns}
    cols.pop("kernel_source", None)
    f = vm.featurize(cols, device)
    err = np.abs(_predict(vm, f, device) / table.latency - 1)
    return Scored(
        gpu=table.gpu,
        engine=table.engine,
        op=table.op,
        method="leave_one_gpu_out",
        err=err,
        tokens=f.tokens,
        load=np.full(len(err), ""),
    )


def other_gpus(db: KernelDB, others: list[tuple[Device, list[KernelTable]]]) -> list[Scored]:
    """:func:`other_gpu` of every table, the roles of one op pooled into one evaluation."""
    pooled: dict[tuple[str, str, str], list[Scored]] = {}
    for device, tables in others:
        for t in tables:
            s = other_gpu(db, t, device)
            if s is not None:
                pooled.setdefault((t.gpu, t.engine, t.op), []).append(s)
    out = []
    for (gpu, engine, op), parts in pooled.items():
        out.append(
            Scored(
                gpu=gpu,
                engine=engine,
                op=op,
                method="leave_one_gpu_out",
                err=np.concatenate([p.err for p in parts]),
                tokens=np.concatenate([p.tokens for p in parts]),
                load=np.concatenate([p.load for p in parts]),
            )
        )
    return out
