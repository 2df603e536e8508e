"""Read NVIDIA's measured kernel tables shipped in ``moeplan/data/measured/kernels/`` (I/O).

From ai-dynamo/aiconfigurator @ 095f58a5 (Apache-2.0, LICENSE in that folder), laid out as
``<gpu>/<family>/<engine>/<version>/<file>.parquet``. Latencies arrive in milliseconds
(``latency``) or microseconds (``*_us``) and leave in seconds. Where an engine has the same
file in several versions the newest is read, unless an engine version is asked
(``--engine-version``: :func:`table_choices`, :mod:`moeplan.backends.versions`; the
leave-one-version-out transfer errors ``moeplan/data/version_transfer.json`` are stated beside
every price read from another version's table). DeepEP is a library shared by the engines: its
tables (collected under SGLang) serve ``sglang``, ``vllm`` and ``trtllm`` alike; the wide-EP
MoE tables (DeepGEMM grouped GEMMs) serve ``sglang`` and ``vllm`` (:data:`WIDEEP_SHARED`).

:func:`kernel_db` builds the :class:`~moeplan.cost.kerneldb.KernelDB` once per process
(each table read on first use, the table GPUs' datasheet devices from the cluster presets,
the shipped held-out errors ``heldout_errors.json``) and :func:`engine_cost_model` hands it
to a :class:`~moeplan.cost.CostModel` (the pure core never loads tables itself).

GPUs: ``h100_sxm`` and ``a100_sxm``, and the Blackwell ``b200_sxm`` and ``gb200`` (every file
of :data:`FILES` NVIDIA measured there, the engines' newest versions read by default). Their
GEMM tables come per engine (``<gpu>/gemm/{sglang,vllm,trtllm}/<version>/gemm_perf.parquet``,
each engine's own dense-GEMM kernels: cuBLAS bf16, DeepGEMM / CUTLASS fp8, FlashInfer CuTe-DSL /
CUTLASS nvfp4) and are not a kernel family of this database: the measurement set of the GPU
(:mod:`moeplan.measured`, the profile's GEMM roofline) reads TensorRT-LLM's (the collector of
the H100 / A100 sets' ``gemm_perf.parquet``) and :func:`moeplan.measured.read_gemm` reads
another engine's when asked; NCCL (``comm/nccl``) is read there too. TensorRT-LLM's
all-to-all on GB200 (``comm/trtllm/*/trtllm_alltoall_perf.parquet``: prepare / dispatch /
combine of its NVLink one- and two-sided kernels, EP 2-64, bf16 / fp8 / nvfp4) is shipped
and not read: moeplan has no price path for TensorRT-LLM's own MoE all-to-all to read it
into (:mod:`moeplan.backends.trtllm`: no DeepEP path for TensorRT-LLM).

Two fused-MoE tables are read without their EP > 1 rows (:data:`EP_ROWS_DROPPED`: SGLang
0.5.10 on A100 and GB200, whose EP rows do not fall with the rank's share of the layer as
every other table's do); an EP query there is priced by the model of their EP-1 rows.

Tables with a frozen test fold (:mod:`moeplan.cost.kerneldb.frozen_fold`) are read without
their test-fold rows: no fit, residual field, development fold or price sees them;
:func:`frozen_test_rows` (the fold's manifest) and :func:`frozen_fold_loaders` (the final
test error of ``moeplan calibrate --kernels --test-fold``) are their only readers.

Built variants are kept on disk between processes by :class:`~moeplan.kernel_store.DiskStore`
(:mod:`moeplan.kernel_store`: content keys, trust checks, the size cap;
``MOEPLAN_CACHE_DIR`` moves the folder, ``MOEPLAN_CACHE_DIR=off`` turns the store off,
``MOEPLAN_CACHE_MAX_MB`` caps its size); its names are re-exported here.
Numeric columns are read from Arrow buffers directly (``to_numpy`` on a chunked array
imports pandas: 0.4 s).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.backends import BACKENDS, backend, kernel_tables
from moeplan.backends.versions import MEASURED, TableChoice, check_version, table_for
from moeplan.cost import CostModel, cost_model_for
from moeplan.cost.kerneldb import (
    KERNEL_FAMILIES,
    Device,
    KernelDB,
    KernelTable,
    device_for,
    frozen_fold,
)
from moeplan.cost.kerneldb.layer_families import LAYER_FILES, ROW_FILTERS
from moeplan.cost.kerneldb.variant import LazyTables
from moeplan.cost.provenance import pricing  # noqa: F401 (re-exported)
from moeplan.errors import MoeplanError
from moeplan.kernel_store import (  # noqa: F401 (re-exported)
    CACHE_ENV,
    CACHE_MAX_ENV,
    CACHE_MAX_MB,
    CACHE_OFF,
    MODEL_SOURCES,
    DiskStore,
    _code_digest,
    cache_dir,
    cache_max_bytes,
)
from moeplan.search.job.outcome import pricing_line  # noqa: F401 (re-exported)
from moeplan.specs import ClusterSpec, load_cluster
from moeplan.specs.presets import cluster_table

#: the engines whose kernel tables are read (each backend's ``kernel_table``)
TABLE_ENGINES = kernel_tables()
#: parquet file -> [(op, {our column: table column}, latency column(s), scale to seconds)]
FILES: dict[str, list[tuple[str, dict[str, str], tuple[str, ...], float]]] = {
    "moe_perf.parquet": [("moe", {}, ("latency",), 1e-3)],
    "context_attention_perf.parquet": [("context_attention", {}, ("latency",), 1e-3)],
    "generation_attention_perf.parquet": [("generation_attention", {}, ("latency",), 1e-3)],
    "context_mla_perf.parquet": [("context_mla", {}, ("latency",), 1e-3)],
    "generation_mla_perf.parquet": [("generation_mla", {}, ("latency",), 1e-3)],
    "mla_context_module_perf.parquet": [("context_mla_module", {}, ("latency",), 1e-3)],
    "mla_generation_module_perf.parquet": [("generation_mla_module", {}, ("latency",), 1e-3)],
    "wideep_context_moe_perf.parquet": [("wideep_context_moe", {}, ("latency",), 1e-3)],
    "wideep_generation_moe_perf.parquet": [("wideep_generation_moe", {}, ("latency",), 1e-3)],
    "wideep_moe_perf.parquet": [("trtllm_wideep_moe", {}, ("latency",), 1e-3)],  # TRT-LLM's
    "wideep_context_mla_perf.parquet": [("wideep_context_mla", {}, ("latency",), 1e-3)],
    "wideep_generation_mla_perf.parquet": [("wideep_generation_mla", {}, ("latency",), 1e-3)],
    **{
        f"wideep_{p}_mlp_perf.parquet": [
            (
                f"wideep_{p}_mlp",
                {
                    "num_tokens": "num_token",
                    "inter_size": "intermediate_size",
                    "moe_dtype": "quant_type",
                },
                ("avg_ms",),
                1e-3,
            )
        ]
        for p in ("context", "generation")
    },  # fmt: skip
    "custom_allreduce_perf.parquet": [("allreduce", {}, ("latency",), 1e-3)],
    "wideep_deepep_normal_perf.parquet": [
        (
            "deepep_normal_dispatch",
            {"sms": "dispatch_sms"},
            ("dispatch_transmit_us", "dispatch_notify_us"),
            1e-6,
        ),
        (
            "deepep_normal_combine",
            {"sms": "combine_sms"},
            ("combine_transmit_us", "combine_notify_us"),
            1e-6,
        ),
    ],
    "wideep_deepep_ll_perf.parquet": [
        ("deepep_ll_dispatch", {}, ("dispatch_avg_t_us",), 1e-6),
        ("deepep_ll_combine", {}, ("combine_avg_t_us",), 1e-6),
    ],
}
FILES.update(LAYER_FILES)  # the newer layer kinds (kerneldb.layer_families)
#: cache dtype spellings of the newer tables -> the one the other tables use
VALUE_ALIASES = {"fp8_e4m3": "fp8"}
#: SGLang's wide-EP MoE tables time DeepGEMM's grouped GEMMs, the kernels vLLM's DeepEP
#: all2all backends run too (vllm/model_executor/layers/fused_moe/deep_gemm_moe.py): they
#: serve every engine whose backend shares them (``shares_wideep_tables``), as the DeepEP
#: tables serve every engine
WIDEEP_SHARED = frozenset({"wideep_context_moe_perf.parquet", "wideep_generation_moe_perf.parquet"})
ERRORS_FILE = "heldout_errors.json"
#: the frozen tables' test-fold errors, stated beside their prices
FROZEN_ERRORS_FILE = "frozen_test_errors.json"
#: the leave-one-GPU-out errors of the Blackwell table GPUs (package data,
#: ``bench/blackwell_transfer.py``): stated beside a price transferred from them
GPU_TRANSFER_FILE = "gpu_transfer.json"
#: the leave-one-version-out transfer errors (package data, ``bench/version_transfer.py``)
TRANSFER_FILE = "version_transfer.json"


def kernels_dir() -> Path:
    return Path(str(resources.files("moeplan").joinpath("data", "measured", "kernels")))


def _numpy(
    column: Any, rows: np.ndarray | None = None, aliases: dict[str, str] | None = None
) -> np.ndarray:
    """One Arrow column as numpy without ``to_numpy`` (which imports pandas): numbers from
    the value buffer, strings through their dictionary. ``rows`` (a boolean mask) keeps
    those rows and ``aliases`` renames string values; a string column's are applied to its
    dictionary and codes before the kept rows are spelled out."""
    import pyarrow as pa

    arr = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    numeric = pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)
    if not arr.null_count and numeric:
        values = np.frombuffer(arr.buffers()[1], dtype=arr.type.to_pandas_dtype())
        values = values[arr.offset : arr.offset + len(arr)]
        return values.copy() if rows is None else values[rows]
    if not arr.null_count and (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        enc = arr.dictionary_encode()
        words = _aliased(np.array([str(w) for w in enc.dictionary.to_pylist()] or [""]), aliases)
        codes = _numpy(enc.indices)
        return words[codes if rows is None else codes[rows]]
    values = _aliased(np.asarray(arr.to_pylist()), aliases)
    return values if rows is None else values[rows]


def _aliased(values: np.ndarray, aliases: dict[str, str] | None) -> np.ndarray:
    """``values`` with every string in ``aliases`` renamed (the same array when none is)."""
    if not aliases or values.dtype.kind not in "US" or not any(a in values for a in aliases):
        return values
    return np.array([aliases.get(x, x) for x in values.tolist()])


#: ``(gpu, engine, version)`` of fused-MoE tables read without their EP > 1 rows. In NVIDIA's
#: SGLang 0.5.10 collections on A100 and GB200 a rank holding ``E / ep`` experts takes as
#: long as the whole layer: over balanced rows of >= 4,096 tokens the median latency at EP 2 /
#: 4 / 8 over EP 1 is 0.96 / 0.90 / 0.87 (A100) and 0.92 / 0.82 / 0.78 (GB200), while in every
#: other table it falls with the rank's FLOPs: 0.69 / 0.49 / 0.37 for the same Triton kernel in
#: H100 SGLang 0.5.9, 0.59 / 0.39 / 0.27 in SGLang 0.5.14 on B200 and GB200, 0.15-0.24 at EP 8
#: in vLLM and TensorRT-LLM (``tests/test_kernel_tables_ep.py`` recomputes the ratios). A rank's
#: GEMMs are 1 / ep of the layer's, so those rows are read as a collection fault, not as the
#: kernel: an EP > 1 query on these tables is priced by the model fitted to their EP-1 rows,
#: its source "transferred" with that error. (Serving agrees: SGLang 0.5.4 bursts of GLM-4.5-Air
#: on 4 A100, TP4 and TP4 + EP4, last 67.3 s and 66.3 s in the lab's measurements.)
EP_ROWS_DROPPED = frozenset({("a100_sxm", "sglang", "0.5.10"), ("gb200", "sglang", "0.5.10")})


def _read(
    path: Path,
    op: str,
    rename: dict[str, str],
    lat: tuple[str, ...],
    scale: float,
    gpu: str,
    engine: str,
    version: str,
    test_fold: bool = False,
) -> KernelTable:
    """One table's rows of ``op``: without a frozen table's test fold (every development
    path), or only that fold (``test_fold``: :func:`frozen_fold_loaders`, the final test error)."""
    import pyarrow.parquet as pq

    fam = KERNEL_FAMILIES[op]
    where = ROW_FILTERS.get((path.name, op), {})
    frozen = frozen_fold.frozen_table(table_relpath(path))
    try:
        pf = pq.ParquetFile(path)  # not read_table: that imports pyarrow.dataset (pandas)
        wanted = {rename.get(c, c) for c in fam.columns} | set(lat) | set(where)
        keys = _key_columns(pf.schema_arrow) if frozen else ()
        table = pf.read(columns=sorted((wanted | set(keys)) & set(pf.schema_arrow.names)))
    except Exception as err:  # pyarrow raises several types for corrupt files
        raise MoeplanError(f"kernel table {path} could not be read: {err}") from None
    have = set(table.column_names)
    for c in fam.columns:
        if rename.get(c, c) not in have and c not in fam.defaults:
            raise MoeplanError(f"kernel table {path} lacks column {rename.get(c, c)!r}")
    n = table.num_rows
    latency = sum(np.asarray(_numpy(table.column(c)), float) for c in lat) * scale
    ok = np.isfinite(latency) & (latency > 0)
    for c, value in where.items():  # rows of another op in the same file
        ok &= _numpy(table.column(c)).astype(str) == value
    if op == "moe" and (gpu, engine, version) in EP_ROWS_DROPPED:  # EP-1 rows only
        ok &= _numpy(table.column(rename.get("moe_ep_size", "moe_ep_size"))) == 1
    if frozen:  # the frozen test fold stays out of every development path
        test = frozen_fold.fold_mask(path.name, _key_codes(table, keys), keys, n)
        ok &= test if test_fold else ~test
    elif test_fold:
        raise MoeplanError(f"kernel table {path} has no frozen test fold")
    kept = int(ok.sum())
    cols = {
        c: _numpy(table.column(rename.get(c, c)), ok, VALUE_ALIASES)
        if rename.get(c, c) in have
        else np.full(kept, fam.defaults[c])
        for c in fam.columns
    }
    return KernelTable(
        gpu=gpu,
        engine=engine,
        op=op,
        version=version,
        columns=cols,
        latency=np.asarray(latency)[ok],
        origin=str(path),
    )


def table_relpath(path: Path) -> str:
    """``gpu/op/engine/version/file`` of a table file (its place under the table root)."""
    return "/".join(path.parts[-5:])


def _arrow_kind(t: Any) -> str:
    """The numpy kind letter of an Arrow type, as :func:`frozen_fold.key_columns` reads it."""
    import pyarrow as pa

    if pa.types.is_integer(t):
        return "i"
    if pa.types.is_boolean(t):
        return "b"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "U"
    return "f"


def _key_columns(schema: Any) -> tuple[str, ...]:
    return frozen_fold.key_columns(schema.names, [_arrow_kind(f.type) for f in schema])


def _key_codes(table: Any, keys: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The shape-key columns of an Arrow table as :data:`frozen_fold.Column` pairs: each
    column's distinct values (a missing value as ``None``) and each row's index into them,
    factorised by Arrow's hash (``dictionary_encode``), not row by row in Python."""
    out = {}
    for c in keys:
        col = table.column(c)
        enc = (col.combine_chunks() if hasattr(col, "combine_chunks") else col).dictionary_encode(
            null_encoding="encode"
        )
        out[c] = (np.asarray(enc.dictionary.to_pylist()), _numpy(enc.indices))
    return out


def frozen_test_rows(path: Path) -> tuple[Any, np.ndarray, list[str]]:
    """Every row of a frozen table (an Arrow table), the test-fold mask and the shape keys:
    the one reader of the frozen test fold (a final test error, never development)."""
    import pyarrow.parquet as pq

    if not frozen_fold.frozen_table(table_relpath(path)):
        raise MoeplanError(f"kernel table {path} has no frozen test fold")
    table = pq.ParquetFile(path).read()
    names = _key_columns(table.schema)
    shapes, index = frozen_fold.shape_index(
        path.name, _key_codes(table, names), names, table.num_rows
    )
    return table, frozen_fold.in_test_fold(shapes)[index], [shapes[i] for i in index.tolist()]


def table_versions(root: Path | None = None) -> dict[tuple[str, str, str], dict[str, Path]]:
    """``(gpu, engine folder, file) -> {version: file}`` of every shipped table, every version."""
    root = root or kernels_dir()
    found: dict[tuple[str, str, str], dict[str, Path]] = {}
    for path in sorted(root.glob("*/*/*/*/*.parquet")):
        gpu, _, engine, version = path.relative_to(root).parts[:4]
        if path.name in FILES:
            found.setdefault((gpu, engine, path.name), {})[version] = path
    return found


def engine_table_versions(engine: str, root: Path | None = None) -> tuple[str, ...]:
    """The releases ``engine``'s own kernel tables were measured at, on any GPU, oldest first
    (:meth:`moeplan.backends.base.EngineBackend.table_versions` of the table folders)."""
    folders = [(e, v) for (_, e, _), vs in table_versions(root).items() for v in vs]
    return backend(engine).table_versions(folders)


def table_choices(
    root: Path | None = None, engine: str | None = None, version: str | None = None
) -> dict[tuple[str, str, str], tuple[Path, TableChoice]]:
    """``(gpu, engine, op) -> (file, choice)`` of every shipped table: for ``engine``'s own
    tables the version that prices ``version`` (:func:`moeplan.backends.versions.table_for`),
    for every other table (and with ``version`` None) the newest."""
    out: dict[tuple[str, str, str], tuple[Path, TableChoice]] = {}
    for (gpu, folder, name), paths in sorted(table_versions(root).items()):
        engines = TABLE_ENGINES if name.startswith("wideep_deepep") else (folder,)
        if name in WIDEEP_SHARED:
            engines = tuple(b.kernel_table for b in BACKENDS.values() if b.shares_wideep_tables)
        for eng in engines:
            asked = eng == folder and eng == engine  # the requested engine's own tables
            choice = table_for(paths, version if asked else None)
            for op, *_ in FILES[name]:
                out[(gpu, eng, op)] = (paths[choice.table], choice)
    return out


def table_files(
    root: Path | None = None, engine: str | None = None, version: str | None = None
) -> dict[tuple[str, str, str], tuple[Path, tuple]]:
    """``(gpu, engine, op) -> (file, read arguments)`` of every shipped table, at the versions
    :func:`table_choices` picks (the newest of each by default)."""
    out: dict[tuple[str, str, str], tuple[Path, tuple]] = {}
    for (gpu, eng, op), (path, _) in table_choices(root, engine, version).items():
        _, rename, lat, scale = next(f for f in FILES[path.name] if f[0] == op)
        out[(gpu, eng, op)] = (path, (op, rename, lat, scale, gpu, eng, path.parent.name))
    return out


def table_loaders(
    root: Path | None = None,
) -> dict[tuple[str, str, str], Callable[[], KernelTable]]:
    """``(gpu, engine, op) -> loader`` of every shipped table, the newest version of each."""
    return {k: partial(_read, path, *args) for k, (path, args) in table_files(root).items()}


def frozen_fold_loaders(
    gpus: tuple[str, ...] = frozen_fold.FROZEN_GPUS, root: Path | None = None
) -> dict[tuple[str, str, str], Callable[[], KernelTable]]:
    """``(gpu, engine, op) -> loader`` of the frozen test-fold rows of the tables the database
    reads on ``gpus`` (the newest version of each, as :func:`table_loaders`): the one reader
    of those rows for a price, called only for the final test error
    (``moeplan calibrate --kernels --test-fold``, :mod:`moeplan.cost.kerneldb.evaluate_test`)."""
    out: dict[tuple[str, str, str], Callable[[], KernelTable]] = {}
    for key, (path, args) in table_files(root).items():
        own = key[1] == path.parts[-3]  # a table shared by engines is scored once, as its own
        if own and key[0] in gpus and frozen_fold.frozen_table(table_relpath(path)):
            out[key] = partial(_read, path, *args, test_fold=True)
    return out


def read_tables(root: Path | None = None) -> list[KernelTable]:
    """Every shipped table, read now (the database itself reads them lazily)."""
    return [load() for load in table_loaders(root).values()]


def table_presets() -> dict[str, str]:
    """Kernel-table GPU -> the cluster preset of its measured node: the preset whose GPU
    record names those ``kernel_tables`` and whose profile is that GPU's measurement set."""
    table = cluster_table()
    out: dict[str, str] = {}
    for name, c in table["clusters"].items():
        kt = table["gpus"][c["gpu"]].get("kernel_tables")
        if kt is not None and c.get("profile") == kt:
            out.setdefault(kt, name)
    return out


def table_devices() -> dict[str, Device]:
    return {gpu: device_for(load_cluster(preset)) for gpu, preset in table_presets().items()}


def read_errors(path: Path | None = None) -> dict[tuple[str, str, str, str], tuple[float, float]]:
    """``(gpu, engine, op, source) -> (median, p90)``: the development folds' held-out errors
    (``heldout_errors.json``) and, for the frozen tables, the final test fold's
    (``frozen_test_errors.json``, ``moeplan calibrate --kernels --test-fold --errors-out``);
    a key in both keeps the development error (``path``: that file alone)."""
    files = [path] if path is not None else [kernels_dir() / FROZEN_ERRORS_FILE,
                                             kernels_dir() / ERRORS_FILE]  # fmt: skip
    out: dict[tuple[str, str, str, str], tuple[float, float]] = {}
    for f in files:
        if not f.is_file():
            continue
        for r in json.loads(f.read_text(encoding="utf-8")).get("errors", []):
            out[(r["gpu"], r["engine"], r["op"], r["source"])] = (r["median"], r["p90"])
    return out


def gpu_transfer_path() -> Path:
    """The shipped leave-one-GPU-out errors of the Blackwell tables (``bench/blackwell_transfer.py``)."""
    return Path(str(resources.files("moeplan").joinpath("data", GPU_TRANSFER_FILE)))


def read_gpu_transfer(path: Path | None = None) -> dict[tuple[str, str, str], tuple[float, float]]:
    """``(reference GPU, engine or "all", op) -> (median, p90)`` of the stated transfer
    errors (empty when the file is absent)."""
    path = path or gpu_transfer_path()
    if not path.is_file():
        return {}
    rows = json.loads(path.read_text(encoding="utf-8"))["stated"]
    return {(r["reference"], r["engine"], r["op"]): (r["median"], r["p90"]) for r in rows}


def version_transfer_path() -> Path:
    """The shipped leave-one-version-out transfer errors (``bench/version_transfer.py``)."""
    return Path(str(resources.files("moeplan").joinpath("data", TRANSFER_FILE)))


def read_version_transfer(path: Path | None = None) -> dict[str, Any]:
    """The shipped transfer errors: ``{"by_engine": {(engine, op): row}, "by_op": {op: row}}``,
    each row with ``median``, ``p90``, ``rows`` and ``pairs`` (empty when the file is absent)."""
    path = path or version_transfer_path()
    if not path.is_file():
        return {"by_engine": {}, "by_op": {}, "gpu": None}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {
        "gpu": data["gpu"],
        "by_engine": {(r["engine"], r["op"]): r for r in data["by_engine"]},
        "by_op": {r["op"]: r for r in data["by_op"]},
    }


def version_record(
    engine: str, op: str, choice: TableChoice, transfer: dict[str, Any]
) -> dict[str, Any]:
    """How one operation of ``engine`` is priced at the requested version: the table version,
    ``measured`` / ``nearest version`` / ``extrapolated``, and for a transfer the error
    measured leave-one-version-out (the engine's own for that operation, else pooled over the
    engines, else ``None``: one version of that table on every engine)."""
    rec: dict[str, Any] = {"table_version": choice.table, "how": choice.how}
    if choice.how == MEASURED:
        return rec
    row = transfer["by_engine"].get((engine, op))
    scope = f"{engine} {op}, leave-one-version-out on {transfer['gpu']}"
    if row is None:
        row = transfer["by_op"].get(op)
        scope = f"{op} pooled over engines, leave-one-version-out on {transfer['gpu']}"
    if row is None:
        return {**rec, "error_median": None, "error_p90": None,
                "error_from": "not measured: one version of this table on every engine"}  # fmt: skip
    return {**rec, "error_median": row["median"], "error_p90": row["p90"], "error_from": scope}


def kernel_db(engine: str | None = None, version: str | None = None) -> KernelDB:
    """The process-wide kernel database, one per requested ``engine`` version (tables read
    once, models built on first use and kept on disk by :class:`DiskStore` unless
    ``MOEPLAN_CACHE_DIR=off``): ``engine``'s own tables at the versions that price
    ``version`` (:func:`table_choices`), every other table (and without ``version``) the
    newest. A malformed version or one newer than every table of the engine is one line."""
    if version is None or engine is None:
        return _kernel_db(None, None)
    check_version(engine, version, engine_table_versions(engine))
    return _kernel_db(engine, version)


@cache
def _kernel_db(engine: str | None, version: str | None) -> KernelDB:
    choices = table_choices(None, engine, version)
    files = table_files(None, engine, version)
    devices = table_devices()
    root = cache_dir()
    store = (
        None if root is None else DiskStore(root, {k: p for k, (p, _) in files.items()}, devices)
    )
    loaders = {k: partial(_read, path, *args) for k, (path, args) in files.items()}
    transfer = read_version_transfer()
    versions = {
        k: version_record(k[1], k[2], choice, transfer) for k, (_, choice) in choices.items()
    }
    asked = (engine, version) if engine is not None and version is not None else None
    db = KernelDB(
        LazyTables(loaders), devices, read_errors(), store, versions=versions,
        engine_version=asked, gpu_transfer=read_gpu_transfer(),
    )  # fmt: skip
    _DATABASES.append(db)
    return db


#: every process-wide kernel database made so far (:func:`save_memos`)
_DATABASES: list[KernelDB] = []


def save_memos() -> int:
    """Write the kernel prices every process-wide kernel database priced and had not kept to
    its store (:meth:`KernelDB.save_memos`): a later moeplan process answers the same rows
    without pricing them. The console script calls it as it ends. The number of files
    written."""
    return sum(db.save_memos() for db in _DATABASES)


def engine_cost_model(
    cluster: ClusterSpec,
    profile: str | None = None,
    engine: str | None = "sglang",
    version: str | None = None,
) -> CostModel:
    """:func:`moeplan.cost.cost_model_for` with the process-wide kernel database: the entry
    point for a cost model that prices kernels from ``engine``'s tables at ``version`` (the
    newest tables: ``None``; no engine: ``None``)."""
    if not engine and version is not None:
        raise MoeplanError(f"--engine-version ({version!r}) needs an engine's kernel tables")
    kernels = kernel_db(engine, version) if engine else None
    return cost_model_for(cluster, profile, engine=engine, kernels=kernels)
