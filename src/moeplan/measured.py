"""Read NVIDIA's measured GEMM/NCCL tables shipped in ``moeplan/data/measured/`` (I/O layer).

Files come from ai-dynamo/aiconfigurator @ 095f58a5 (Apache-2.0, see the LICENSE there):
``gemm_perf.parquet`` (latency in ms by gemm_dtype, m, n, k) and ``nccl_perf.parquet``
(latency in ms by op_name, nccl_dtype, num_gpus, message_size in elements).

A GPU whose NVIDIA tables come per engine (B200, GB200: ``kernels/<gpu>/gemm/<engine>/<version>/
gemm_perf.parquet`` and ``kernels/<gpu>/comm/nccl/<version>/nccl_perf.parquet``) keeps only
its ``system.yaml`` in its measurement-set folder; its GEMM and NCCL rows are read from those
kernel tables (the newest version of each, :func:`table_file`). The GEMM of the measurement set
is TensorRT-LLM's table (:data:`SET_GEMM_ENGINE`: the collector of the H100 / A100 sets'
``gemm_perf.parquet``, cuBLAS through ``torch_flow``; on B200 the bf16 rows of vLLM's table are
0.99x its latency at the median, 0.91-1.08x from the 10th to the 90th percentile, SGLang's 1.02x,
0.95-1.26x); :func:`read_gemm` reads another engine's table when asked (``engine``).
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
#: the engine whose per-engine GEMM table is a measurement set's GEMM (module docstring)
SET_GEMM_ENGINE = "trtllm"


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


def table_file(name: str, file: str, engine: str | None = None) -> Path:
    """``file`` of the measurement set ``name``: its own folder's copy, else the newest
    per-engine kernel table of that GPU (GEMM: ``engine``'s, default :data:`SET_GEMM_ENGINE`;
    NCCL: ``comm/nccl``), as the module docstring says. A GEMM of a named ``engine`` is always
    its kernel table."""
    own = measured_dir(name) / file
    if own.exists() and engine is None:
        return own
    family, folder = ("gemm", engine or SET_GEMM_ENGINE) if file == "gemm_perf.parquet" else (
        "comm", "nccl")  # fmt: skip
    root = Path(str(resources.files("moeplan").joinpath("data", "measured", "kernels")))
    found = sorted((root / name / family / folder).glob(f"*/{file}"), key=_version_key)
    if not found:
        raise MoeplanError(f"measured[{name}] has no {file} (nor a {family}/{folder} kernel table)")
    return found[-1]


def _version_key(path: Path) -> tuple:
    from moeplan.backends.versions import version_key

    return version_key(path.parent.name)


def _table(path: Path, columns: list[str]) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=columns)
    except Exception as err:  # pyarrow raises several types for corrupt files
        raise MoeplanError(f"measured file {path} could not be read: {err}") from None
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in columns}


def read_gemm(name: str, dtype: str = "bfloat16", engine: str | None = None) -> GemmRows:
    """The ``dtype`` GEMM rows of measurement set ``name`` (``engine``: that engine's table)."""
    path = table_file(name, "gemm_perf.parquet", engine)
    d = _table(path, ["gemm_dtype", "m", "n", "k", "latency"])
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
    d = _table(table_file(name, "nccl_perf.parquet"), cols)
    size = np.array([DTYPE_BYTES[str(t)] for t in d["nccl_dtype"]], dtype=float)
    return NcclRows(
        op=np.array([MEASURED_OPS[str(o)] for o in d["op_name"]]),
        num_gpus=d["num_gpus"].astype(int),
        nbytes=d["message_size"].astype(float) * size,
        latency=d["latency"].astype(float) * 1e-3,
    )
