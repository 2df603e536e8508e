"""Kernel database: measured kernel latencies per GPU and engine, and a model that transfers.

Pure (no file I/O, no torch): tables arrive as arrays from :mod:`moeplan.kernel_tables`.
See :mod:`.db` for how a prediction is chosen, :mod:`.families` for the per-operation work
formulas, :mod:`.fit` for the analytic model and the residual field, :mod:`.load` for the
expert load of the busiest EP rank, :mod:`.evaluate` for the held-out evaluation.

Departures from the issue text: the tables' shape axes are not a full grid, so "interpolation
across shapes" is the analytic model corrected by the inverse-distance-weighted log residuals
of the nearest measured rows in log2 shape coordinates (exact linear interpolation in log2
along the token axis when the shape itself was measured).
"""

from moeplan.cost.kerneldb.db import TABLE_ENGINES, KernelDB
from moeplan.cost.kerneldb.device import Device, device_for
from moeplan.cost.kerneldb.families import KERNEL_FAMILIES, OPS
from moeplan.cost.kerneldb.sources import SOURCES, Prediction
from moeplan.cost.kerneldb.variant import KernelTable

__all__ = [
    "TABLE_ENGINES",
    "KERNEL_FAMILIES",
    "OPS",
    "SOURCES",
    "Device",
    "KernelDB",
    "KernelTable",
    "Prediction",
    "device_for",
]
