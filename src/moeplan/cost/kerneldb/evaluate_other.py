"""Leave-one-GPU-out on a second GPU's measurements outside NVIDIA's tables (InferSim's H20
Gated DeltaNet and H800 FlashMLA sparse-attention rows, read by
:mod:`moeplan.infersim_tables`).

Every row of the other GPU's table is predicted the way :class:`~.db.KernelDB` predicts a GPU
without tables: the reference table GPU's variant of the same kernel role (convolution or
delta rule: the engine's kernel with most rows; other ops: the variant of the rows' dtypes, else the
engine's default), its efficiencies scaled by the other GPU's
datasheet, corrected by the reference's residual field inside its measured box. The errors
are the ``transferred`` source's for that op (:func:`~.evaluate.error_table` folds them into
the ``other`` GPUs' figure).
"""

from __future__ import annotations

import numpy as np

from moeplan.cost.kerneldb.db import KernelDB
from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.evaluate import Scored, _predict
from moeplan.cost.kerneldb.families import KERNEL_FAMILIES
from moeplan.cost.kerneldb.linear_features import is_conv
from moeplan.cost.kerneldb.variant import KernelTable


def other_gpu(db: KernelDB, table: KernelTable, device: Device) -> Scored | None:
    """Errors of ``table``'s rows (one kernel role) predicted from ``device``'s reference."""
    fam, ref = KERNEL_FAMILIES[table.op], device.reference
    key = _reference_key(db, table, ref)
    if key is None or not len(table.latency):
        return None
    vm = db.variant(ref, table.engine, table.op, key)
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


#: ops whose tables time a layer as a convolution and a recurrence (matched by role)
RECURRENT_OPS = tuple(f"{p}_{k}" for p in ("context", "generation")
                      for k in ("gdn", "kda", "mamba2_conv"))  # fmt: skip


def _reference_key(db: KernelDB, table: KernelTable, ref: str) -> tuple | None:
    """The reference variant: same kernel role for the recurrent kinds (convolution or
    delta rule, the kernel with most rows); for other ops whose rows name their kernel, that
    kernel (``None`` where the reference never measured it: one kernel's rows are not
    scored against another's — FlashMLA's decode kernel against its prefill kernel); else
    the one of the rows' dtypes, else the engine's default (as :class:`~.db.KernelDB`
    transfers)."""
    fam = KERNEL_FAMILIES[table.op]
    named = "kernel_source" in table.columns
    if named and table.op not in RECURRENT_OPS:
        want = {c: str(np.asarray(table.columns[c])[0]) for c in fam.variant_cols
                if c in table.columns}  # fmt: skip
        kernel = {"kernel_source": want["kernel_source"]}
        return db.choose(ref, table.engine, table.op, want) or db.choose(
            ref, table.engine, table.op, kernel
        )
    if named:
        conv = bool(is_conv(np.asarray(table.columns["kernel_source"][:1]))[0])
        found = [
            (n, k)
            for k, n in db.variants(ref, table.engine, table.op).items()
            if bool(is_conv(np.array([k[0]]))[0]) == conv
        ]
        return max(found)[1] if found else None
    want = {
        c: str(np.asarray(table.columns[c])[0])
        for c in fam.variant_cols
        if c in table.columns and c != "kernel_source"
    }
    return db.choose(ref, table.engine, table.op, want) or db.choose(
        ref, table.engine, table.op, {}
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
