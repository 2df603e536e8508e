"""Why a kernel price is not a measured row: the cause of each :class:`Prediction`, read from
its source and detail (what :mod:`moeplan.cost.price_sources` sums seconds by).

A price's key is ``(operation, source, cause)``; the causes are fixed sentences, so that a
report names the real reason a price was not read from a table (no table for this GPU, a
shape outside the measured range, no inter-node table, a price raised to the datasheet floor).
Pure: no I/O.
"""

from __future__ import annotations

from moeplan.backends.versions import EXTRAPOLATED
from moeplan.cost.kerneldb.rows import BEYOND_NOTE, DTYPE_NOTE, EDGE_NOTE, PEAK_NOTE, RELEASE_NOTE
from moeplan.cost.kerneldb.sources import Prediction

#: The detail of a DeepEP price across nodes (:mod:`moeplan.cost.wideep`): no table measures it.
INTERNODE_NOTE = "intra-node model moved to the RDMA link, no held-out rows"
#: The detail of a DeepEP low-latency price across nodes (:mod:`moeplan.cost.deepep_ll`).
PUBLISHED_LL_NOTE = "DeepEP's published inter-node low-latency rate, scaled to the RDMA link"
#: The detail of an intra-node all-to-all priced on bytes per rank (:mod:`.kerneldb.pricing`).
BYTES_A2A_NOTE = "DeepEP normal dispatch/combine model on bytes per rank"

WHY_MEASURED = "the exact row of the measured table"
NEAREST = (
    "no table of the requested engine release: the newest older release's table, its "
    "leave-one-version-out error added"
)
EXTRAPOLATED_RELEASE = (
    "engine release older than every table: the oldest release's table (extrapolated), its "
    "leave-one-version-out error added"
)
FLOOR = "raised to the datasheet floor (the table's model was faster than the peak)"
NO_TABLE_ANY = "no table for this operation and engine on any GPU: datasheet peaks"
NO_INTERNODE = "no inter-node table: the intra-node DeepEP model moved to the RDMA link"
NO_INTERNODE_LL = (
    "no inter-node table: DeepEP's published low-latency figures (H800, CX7), scaled to the "
    "cluster's RDMA bandwidth"
)
NO_DTYPE_TABLE = "no table for this weight dtype: another dtype's model, scaled by the datasheet"
NO_GPU_TABLE = (
    "no table of this operation for this GPU: another GPU's table scaled by this GPU's datasheet"
)
EDGE = "shape outside the measured range: the last measured row's residual carried on"
OUTSIDE = "shape outside the measured range: the table GPU's model, uncorrected"
BYTES_A2A = "no table row for an all-to-all given as bytes per rank: the DeepEP model"
BEYOND = "shape beyond the table: the nearest measured shape's residual"
BETWEEN = "shape between measured rows of this GPU's table"
ANALYTIC = (
    "no kernel table for GEMMs, projections, element-wise passes (norms, RoPE, activation) "
    "and other collectives"
)
WHY_NO_ENGINE = "no engine's kernel tables asked: every operation from the GEMM/NCCL model"

PriceKey = tuple[str, str, str]


def price_cause(p: Prediction) -> str:
    """Why ``p`` is priced from its source (a fixed sentence, module docstring)."""
    d = p.detail
    if RELEASE_NOTE in d:
        return EXTRAPOLATED_RELEASE if f"{RELEASE_NOTE} {EXTRAPOLATED}" in d else NEAREST
    if p.source == "measured":
        return WHY_MEASURED
    if p.source == "roofline":
        return FLOOR if d.endswith(PEAK_NOTE) else NO_TABLE_ANY
    if p.source == "interpolated":
        return BEYOND if d.endswith(BEYOND_NOTE) else BETWEEN
    if d.endswith(INTERNODE_NOTE):
        return NO_INTERNODE
    if d.endswith(PUBLISHED_LL_NOTE):
        return NO_INTERNODE_LL
    if d.endswith(DTYPE_NOTE):
        return NO_DTYPE_TABLE
    if "scaled to" in d and "datasheet" in d:
        return NO_GPU_TABLE
    if d.endswith(EDGE_NOTE):
        return EDGE
    if d == BYTES_A2A_NOTE:
        return BYTES_A2A
    return OUTSIDE


def price_key(op: str, p: Prediction) -> PriceKey:
    """The accounting key of a price: operation, source, cause."""
    return (op, p.source, price_cause(p))
