"""Read NVIDIA's measured kernel tables shipped in ``moeplan/data/measured/kernels/`` (I/O).

From ai-dynamo/aiconfigurator @ 095f58a5 (Apache-2.0, LICENSE in that folder), laid out as
``<gpu>/<family>/<engine>/<version>/<file>.parquet``. Latencies arrive in milliseconds
(``latency``) or microseconds (``*_us``) and leave in seconds. Where an engine has the same
file in several versions the newest is read. DeepEP is a library shared by the engines: its
tables (collected under SGLang) serve ``sglang``, ``vllm`` and ``trtllm`` alike.

:func:`kernel_db` builds the :class:`~moeplan.cost.kerneldb.KernelDB` once per process
(each table read on first use, the table GPUs' datasheet devices from the cluster presets,
the shipped held-out errors ``heldout_errors.json``) and :func:`engine_cost_model` hands it
to a :class:`~moeplan.cost.CostModel` (the pure core never loads tables itself).

Cold start: building one kernel variant (selection, dedupe, features, the SciPy fit and its
residual field) takes 0.2–1 s, and a planner with an engine touches five or more. Built
variants are therefore kept on disk by :class:`DiskStore` under :func:`cache_dir`, one pickle
per variant named by a content key — SHA-256 of the table file, of every source file of
``moeplan.cost.kerneldb`` and of this module, the table GPU's datasheet device and the Python,
NumPy and SciPy versions — so a changed table, model or library is rebuilt, never served
stale. Only files in a folder owned by the user and writable by no one else are read.
A variant's file from an older table or model is removed when its new one is written.
``MOEPLAN_CACHE_DIR`` moves the folder; ``MOEPLAN_CACHE_DIR=off`` turns the store off.
Numeric columns are read from Arrow buffers directly (``to_numpy`` on a chunked array
imports pandas: 0.4 s).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.cost import CostModel, cost_model_for
from moeplan.cost.kerneldb import FAMILIES, Device, KernelDB, KernelTable, device_for
from moeplan.cost.kerneldb.families import Family
from moeplan.cost.kerneldb.variant import LazyTables
from moeplan.errors import MoeplanError
from moeplan.specs import ClusterSpec, load_cluster

ENGINES = ("sglang", "vllm", "trtllm")
#: parquet file -> [(op, {our column: table column}, latency column(s), scale to seconds)]
FILES: dict[str, list[tuple[str, dict[str, str], tuple[str, ...], float]]] = {
    "moe_perf.parquet": [("moe", {}, ("latency",), 1e-3)],
    "context_attention_perf.parquet": [("context_attention", {}, ("latency",), 1e-3)],
    "generation_attention_perf.parquet": [("generation_attention", {}, ("latency",), 1e-3)],
    "context_mla_perf.parquet": [("context_mla", {}, ("latency",), 1e-3)],
    "generation_mla_perf.parquet": [("generation_mla", {}, ("latency",), 1e-3)],
    "mla_context_module_perf.parquet": [("context_mla_module", {}, ("latency",), 1e-3)],
    "mla_generation_module_perf.parquet": [("generation_mla_module", {}, ("latency",), 1e-3)],
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
#: table GPU -> the cluster preset whose datasheet numbers it has
TABLE_PRESETS = {"h100_sxm": "h100-sxm-8", "a100_sxm": "a100-sxm-8"}
ERRORS_FILE = "heldout_errors.json"
CACHE_ENV = "MOEPLAN_CACHE_DIR"
CACHE_OFF = ("", "0", "off", "none")
#: sources whose change invalidates a stored variant (besides the table file itself)
MODEL_SOURCES = ("cost/kerneldb", "kernel_tables.py")


def kernels_dir() -> Path:
    return Path(str(resources.files("moeplan").joinpath("data", "measured", "kernels")))


def _version_key(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in v.replace("rc", ".rc.").split("."))


def _numpy(column: Any) -> np.ndarray:
    """One Arrow column as numpy without ``to_numpy`` (which imports pandas): numbers from
    the value buffer, strings through their dictionary."""
    import pyarrow as pa

    arr = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    if arr.null_count:
        return np.asarray(arr.to_pylist())
    if pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
        values = np.frombuffer(arr.buffers()[1], dtype=arr.type.to_pandas_dtype())
        return values[arr.offset : arr.offset + len(arr)].copy()
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        enc = arr.dictionary_encode()
        words = np.array([str(w) for w in enc.dictionary.to_pylist()] or [""])
        return words[_numpy(enc.indices)]
    return np.asarray(arr.to_pylist())


def _read(
    path: Path,
    op: str,
    rename: dict[str, str],
    lat: tuple[str, ...],
    scale: float,
    gpu: str,
    engine: str,
    version: str,
) -> KernelTable:
    import pyarrow.parquet as pq

    fam = FAMILIES[op]
    try:
        pf = pq.ParquetFile(path)  # not read_table: that imports pyarrow.dataset (pandas)
        wanted = {rename.get(c, c) for c in fam.columns} | set(lat)
        table = pf.read(columns=sorted(wanted & set(pf.schema_arrow.names)))
    except Exception as err:  # pyarrow raises several types for corrupt files
        raise MoeplanError(f"kernel table {path} could not be read: {err}") from None
    have = set(table.column_names)
    cols: dict[str, np.ndarray] = {}
    n = table.num_rows
    for c in fam.columns:
        src = rename.get(c, c)
        if src in have:
            cols[c] = _numpy(table.column(src))
        elif c in fam.defaults:
            cols[c] = np.full(n, fam.defaults[c])
        else:
            raise MoeplanError(f"kernel table {path} lacks column {src!r}")
    latency = sum(np.asarray(_numpy(table.column(c)), float) for c in lat) * scale
    ok = np.isfinite(latency) & (latency > 0)
    cols = {c: v[ok] for c, v in cols.items()}
    return KernelTable(
        gpu=gpu,
        engine=engine,
        op=op,
        version=version,
        columns=cols,
        latency=np.asarray(latency)[ok],
        origin=str(path),
    )


def table_files(root: Path | None = None) -> dict[tuple[str, str, str], tuple[Path, tuple]]:
    """``(gpu, engine, op) -> (file, read arguments)`` of every shipped table (newest
    version of each)."""
    root = root or kernels_dir()
    newest: dict[tuple[str, str, str], Path] = {}
    for path in sorted(root.glob("*/*/*/*/*.parquet")):
        gpu, _, engine, version = path.relative_to(root).parts[:4]
        if path.name not in FILES:
            continue
        key = (gpu, path.name, engine)
        if key not in newest or _version_key(version) > _version_key(newest[key].parent.name):
            newest[key] = path
    out: dict[tuple[str, str, str], tuple[Path, tuple]] = {}
    for (gpu, name, engine), path in sorted(newest.items()):
        engines = ENGINES if name.startswith("wideep_deepep") else (engine,)
        for op, rename, lat, scale in FILES[name]:
            for eng in engines:
                out[(gpu, eng, op)] = (path, (op, rename, lat, scale, gpu, eng, path.parent.name))
    return out


def table_loaders(
    root: Path | None = None,
) -> dict[tuple[str, str, str], Callable[[], KernelTable]]:
    """``(gpu, engine, op) -> loader`` of every shipped table, the newest version of each."""
    return {k: partial(_read, path, *args) for k, (path, args) in table_files(root).items()}


def read_tables(root: Path | None = None) -> list[KernelTable]:
    """Every shipped table, read now (the database itself reads them lazily)."""
    return [load() for load in table_loaders(root).values()]


def table_devices() -> dict[str, Device]:
    return {gpu: device_for(load_cluster(preset)) for gpu, preset in TABLE_PRESETS.items()}


def read_errors(path: Path | None = None) -> dict[tuple[str, str, str, str], tuple[float, float]]:
    path = path or kernels_dir() / ERRORS_FILE
    if not path.is_file():
        return {}
    rows = json.loads(path.read_text(encoding="utf-8"))["errors"]
    return {(r["gpu"], r["engine"], r["op"], r["source"]): (r["median"], r["p90"]) for r in rows}


# ---- built variants kept across processes --------------------------------------------
def cache_dir() -> Path | None:
    """Where built kernel variants are kept (``None``: not kept)."""
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return None if env.strip().lower() in CACHE_OFF else Path(env) / "kerneldb"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "moeplan" / "kerneldb"


@cache
def _code_digest() -> str:
    """SHA-256 of the modelling code and the libraries whose objects are pickled."""
    import scipy

    h = hashlib.sha256(f"{sys.version}|{np.__version__}|{scipy.__version__}".encode())
    pkg = Path(__file__).parent
    for rel in MODEL_SOURCES:
        target = pkg / rel
        for f in sorted(target.rglob("*.py")) if target.is_dir() else [target]:
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


class DiskStore:
    """Built variants and variant counts of the tables in ``files``, pickled in ``root``
    under a content key (module docstring). Best effort: an unreadable, foreign or corrupt
    file is a miss, a failed write is ignored (the variant is simply built again)."""

    def __init__(
        self, root: Path, files: dict[tuple[str, str, str], Path], devices: dict[str, Device]
    ) -> None:
        self.root, self.files, self.devices = root, files, devices
        self._table_digest: dict[Path, str] = {}

    def path(self, key: tuple) -> Path | None:
        """The file of ``key`` (``(kind, gpu, engine, op, ...)``), ``None`` for an unknown table."""
        gpu, engine, op = key[1:4]
        table = self.files.get((gpu, engine, op))
        if table is None:
            return None
        if table not in self._table_digest:
            self._table_digest[table] = hashlib.sha256(table.read_bytes()).hexdigest()
        text = f"{self.devices.get(gpu)!r}|{self._table_digest[table]}|{_code_digest()}"
        content = hashlib.sha256(text.encode()).hexdigest()[:24]
        return self.root / f"{self._stem(key)}-{content}.pkl"

    @staticmethod
    def _stem(key: tuple) -> str:
        """The part of a file name that names the variant (not the content it was built from)."""
        gpu, engine, op = key[1:4]
        return f"{gpu}-{engine}-{op}-{key[0]}-{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}"

    def get(self, key: tuple) -> Any | None:
        path = self.path(key)
        try:
            if path is None or not _trusted(path):
                return None
            with path.open("rb") as f:
                return _Unpickler(f).load()
        except Exception:  # a truncated or foreign pickle is a miss (rebuilt and rewritten)
            return None

    def put(self, key: tuple, value: Any) -> None:
        path = self.path(key)
        if path is None:
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not _trusted(self.root):
                return
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:  # mkstemp: mode 0600
                    _Pickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
                os.replace(tmp, path)
                for old in self.root.glob(f"{self._stem(key)}-*.pkl"):
                    if old != path:  # built from an older table or model: one file per variant
                        old.unlink(missing_ok=True)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except (OSError, pickle.PicklingError, AttributeError, TypeError):
            return  # not kept: built again next time


class _Pickler(pickle.Pickler):
    """Families (code, some holding local functions) are stored by name, not by value."""

    def persistent_id(self, obj: Any) -> Any:
        return ("family", obj.op) if isinstance(obj, Family) else None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and pid[:1] == ("family",) and pid[1] in FAMILIES:
            return FAMILIES[pid[1]]
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def _trusted(path: Path) -> bool:
    """Owned by this user and writable by no one else (file and folder)."""
    for p in (path, path.parent) if path.is_file() else (path,):
        st = p.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            return False
    return True


@cache
def kernel_db() -> KernelDB:
    """The process-wide kernel database (tables read once, models built on first use and
    kept on disk by :class:`DiskStore` unless ``MOEPLAN_CACHE_DIR=off``)."""
    files = table_files()
    devices = table_devices()
    root = cache_dir()
    store = (
        None if root is None else DiskStore(root, {k: p for k, (p, _) in files.items()}, devices)
    )
    loaders = {k: partial(_read, path, *args) for k, (path, args) in files.items()}
    return KernelDB(LazyTables(loaders), devices, read_errors(), store=store)


def engine_cost_model(
    cluster: ClusterSpec, profile: str | None = None, engine: str | None = "sglang"
) -> CostModel:
    """:func:`moeplan.cost.cost_model_for` with the process-wide kernel database: the entry
    point for a cost model that prices kernels from ``engine``'s tables (``None``: none)."""
    return cost_model_for(cluster, profile, engine=engine, kernels=kernel_db() if engine else None)


# ---- what priced a plan ----------------------------------------------------------------
def pricing(cm: CostModel) -> dict[str, Any]:
    """Which engine's kernels priced the operations ``cm`` was asked for so far, from which
    tables, and the source mix (share of kernel lookups per source, with held-out errors)."""
    gpu = cm.cluster.gpu.name
    if cm.engine is None:
        return {
            "engine": None,
            "gpu": gpu,
            "sources": {},
            "ops": {},
            "note": f"no engine: every operation from the {cm.profile_name} GEMM/NCCL model",
        }
    dev = device_for(cm.cluster)
    ops = cm.provenance()
    calls: dict[str, int] = {}
    for cells in ops.values():
        for src, cell in cells.items():
            calls[src] = calls.get(src, 0) + int(cell["calls"] or 0)
    total = sum(calls.values())
    tables = f"NVIDIA's measured {cm.engine} tables on {dev.table}"
    note = (
        f"{cm.engine} kernels from {tables}"
        if dev.table is not None
        else f"no measured tables for {gpu}: {cm.engine} kernels transferred from the "
        f"{dev.reference} tables, scaled by the {gpu} datasheet"
    )
    return {
        "engine": cm.engine,
        "gpu": gpu,
        "tables_gpu": dev.table,
        "reference_gpu": dev.reference,
        "transferred_gpu": dev.table is None,
        "lookups": total,
        "sources": {s: {"lookups": n, "share": n / total} for s, n in sorted(calls.items())},
        "ops": ops,
        "note": note + "; GEMMs, projections and inter-node traffic from the "
        f"{cm.profile_name} model",
    }


def pricing_line(p: dict[str, Any]) -> str:
    """One line for terminals and script headers: engine, tables, source mix."""
    if p["engine"] is None:
        return f"kernel prices: {p['note']}"
    mix = ", ".join(f"{s} {v['share']:.0%}" for s, v in p["sources"].items()) or "none used"
    return f"kernel prices: {p['note']}; sources of {p['lookups']:,} kernel lookups: {mix}"
