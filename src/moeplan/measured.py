"""Read NVIDIA's measured GEMM/NCCL tables shipped in ``moeplan/data/measured/`` (I/O layer).

Files come from ai-dynamo/aiconfigurator @ 095f58a5 (Apache-2.0, see the LICENSE there):
``gemm_perf.parquet`` (latency in ms by gemm_dtype, m, n, k) and ``nccl_perf.parquet``
(latency in ms by op_name, nccl_dtype, num_gpus, message_size in elements).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np

from moeplan.cost.calibrate import DTYPE_BYTES, MEASURED_OPS, GemmRows, NcclRows
from moeplan.errors import MoeplanError
from moeplan.specs import gpu_records

#: the shipped measurement sets: the ``measured`` field of the GPU records
MEASURED = tuple(sorted({g.measured for g in gpu_records().values() if g.measured}))


def measured_dir(name: str) -> Path:
    """Folder of the shipped measurement set ``name`` (or a user folder path)."""
    if name in MEASURED:
        return Path(str(resources.files("moeplan").joinpath("data", "measured", name)))
    path = Path(name)
    if not (path / "gemm_perf.parquet").exists() or not (path / "nccl_perf.parquet").exists():
        raise MoeplanError(
            f"measured ({name!r}) must be one of {', '.join(MEASURED)} or a "
            "folder holding gemm_perf.parquet and nccl_perf.parquet"
        )
    return path


def _table(path: Path, columns: list[str]) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=columns)
    except Exception as err:  # pyarrow raises several types for corrupt files
        raise MoeplanError(f"measured file {path} could not be read: {err}") from None
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in columns}


def read_gemm(name: str, dtype: str = "bfloat16") -> GemmRows:
    d = _table(measured_dir(name) / "gemm_perf.parquet", ["gemm_dtype", "m", "n", "k", "latency"])
    sel = d["gemm_dtype"] == dtype
    if not sel.any():
        raise MoeplanError(f"measured[{name}] has no GEMM rows of dtype {dtype!r}")
    return GemmRows(
        m=d["m"][sel].astype(float),
        n=d["n"][sel].astype(float),
        k=d["k"][sel].astype(float),
        latency=d["latency"][sel].astype(float) * 1e-3,
    )


def read_nccl(name: str) -> NcclRows:
    cols = ["op_name", "nccl_dtype", "num_gpus", "message_size", "latency"]
    d = _table(measured_dir(name) / "nccl_perf.parquet", cols)
    size = np.array([DTYPE_BYTES[str(t)] for t in d["nccl_dtype"]], dtype=float)
    return NcclRows(
        op=np.array([MEASURED_OPS[str(o)] for o in d["op_name"]]),
        num_gpus=d["num_gpus"].astype(int),
        nbytes=d["message_size"].astype(float) * size,
        latency=d["latency"].astype(float) * 1e-3,
    )
