"""Leave one engine version out: how far one release's kernel table prices another's rows.

``--engine-version V`` prices an operation from another release's table where ``V`` has none
(:func:`moeplan.backends.versions.table_for`: the newest older table, ``nearest version``, or
the oldest, ``extrapolated``). The error stated beside such a price is measured here on the
GPU with several releases of one engine's tables: every release ``A`` of an operation is left
out in turn, the table the same rule picks from the remaining releases (``B``) is built into a
:class:`~.db.KernelDB` alone, and every row of ``A`` is priced by it as the database prices a
user's query — the row's dtype columns, the engine's default kernel for them (``A``'s kernel
name dropped: a release's kernels are what changes) — against ``A``'s measured latency:
``|priced / measured - 1|``. Rows of a dtype ``B`` did not measure are priced as the database
prices them (another dtype's model scaled by the datasheet), not left out.

:func:`leave_one_version_out` gives one :class:`TransferRow` per left-out release;
:func:`pooled` the median and 90th percentile over several (an engine's releases of one
operation, or every engine's). ``bench/version_transfer.py`` writes them to
``moeplan/data/version_transfer.json``. Pure: tables in, figures out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from moeplan.backends.versions import table_for
from moeplan.cost.kerneldb.db import KernelDB
from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.variant import KernelTable


@dataclass(frozen=True, slots=True)
class TransferRow:
    """The rows of release ``left_out`` priced from release ``priced_with``'s table."""

    engine: str
    op: str
    left_out: str
    priced_with: str
    how: str  # "nearest version" or "extrapolated" (moeplan.backends.versions)
    err: np.ndarray  # |priced / measured - 1| per row of left_out

    def to_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "op": self.op,
            "left_out": self.left_out,
            "priced_with": self.priced_with,
            "how": self.how,
            "rows": int(self.err.size),
            "median": _q(self.err, 50),
            "p90": _q(self.err, 90),
        }


def transfer_errors(left_out: KernelTable, priced_with: KernelTable, device: Device) -> np.ndarray:
    """``|priced / measured - 1|`` of every row of ``left_out`` priced by a database holding
    ``priced_with`` alone (same GPU, engine and operation; module docstring)."""
    key = (priced_with.gpu, priced_with.engine, priced_with.op)
    if key != (left_out.gpu, left_out.engine, left_out.op):
        raise ValueError(f"tables {key} and {left_out.gpu, left_out.engine, left_out.op} differ")
    db = KernelDB([priced_with], {priced_with.gpu: device})
    query = {c: np.asarray(v) for c, v in left_out.columns.items() if c != "kernel_source"}
    priced = db.seconds_many(left_out.op, device, left_out.engine, query)
    return np.abs(priced / np.asarray(left_out.latency, float) - 1.0)


def leave_one_version_out(tables: Mapping[str, KernelTable], device: Device) -> list[TransferRow]:
    """One :class:`TransferRow` per release of ``tables`` (release -> the table of one GPU,
    engine and operation), each priced from the release :func:`table_for` picks among the
    others; empty with fewer than two releases."""
    out = []
    for version, table in tables.items():
        rest = [v for v in tables if v != version]
        if not rest or not len(table.latency):
            continue
        choice = table_for(rest, version)
        err = transfer_errors(table, tables[choice.table], device)
        out.append(TransferRow(table.engine, table.op, version, choice.table, choice.how, err))
    return out


def pooled(rows: Iterable[TransferRow]) -> dict[str, object] | None:
    """Median and p90 error over the rows of several transfers, with the row count and the
    transfers (``left_out<-priced_with``); ``None`` for none."""
    rows = list(rows)
    if not rows:
        return None
    err = np.concatenate([r.err for r in rows])
    return {
        "rows": int(err.size),
        "median": _q(err, 50),
        "p90": _q(err, 90),
        "pairs": [f"{r.engine} {r.left_out}<-{r.priced_with}" for r in rows],
    }


def _q(err: np.ndarray, q: float) -> float | None:
    err = err[np.isfinite(err)]
    return round(float(np.percentile(err, q)), 4) if err.size else None
