"""Read NVIDIA's measured kernel tables shipped in ``moeplan/data/measured/kernels/`` (I/O).

From ai-dynamo/aiconfigurator @ 095f58a5 (Apache-2.0, LICENSE in that folder), laid out as
``<gpu>/<family>/<engine>/<version>/<file>.parquet``. Latencies arrive in milliseconds
(``latency``) or microseconds (``*_us``) and leave in seconds. Where an engine has the same
file in several versions the newest is read. DeepEP is a library shared by the engines: its
tables (collected under SGLang) serve ``sglang``, ``vllm`` and ``trtllm`` alike.

:func:`kernel_db` builds the :class:`~moeplan.cost.kerneldb.KernelDB` once per process
(each table read on first use, the table GPUs' datasheet devices from the cluster presets,
the shipped held-out errors ``heldout_errors.json``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache, partial
from importlib import resources
from pathlib import Path

import numpy as np

from moeplan.cost.kerneldb import FAMILIES, Device, KernelDB, KernelTable, device_for
from moeplan.cost.kerneldb.variant import LazyTables
from moeplan.errors import MoeplanError
from moeplan.specs import load_cluster

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


def kernels_dir() -> Path:
    return Path(str(resources.files("moeplan").joinpath("data", "measured", "kernels")))


def _version_key(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in v.replace("rc", ".rc.").split("."))


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
            cols[c] = table.column(src).to_numpy(zero_copy_only=False)
        elif c in fam.defaults:
            cols[c] = np.full(n, fam.defaults[c])
        else:
            raise MoeplanError(f"kernel table {path} lacks column {src!r}")
    latency = (
        sum(np.asarray(table.column(c).to_numpy(zero_copy_only=False), float) for c in lat) * scale
    )
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


def table_loaders(
    root: Path | None = None,
) -> dict[tuple[str, str, str], Callable[[], KernelTable]]:
    """``(gpu, engine, op) -> loader`` of every shipped table, the newest version of each."""
    root = root or kernels_dir()
    newest: dict[tuple[str, str, str], Path] = {}
    for path in sorted(root.glob("*/*/*/*/*.parquet")):
        gpu, _, engine, version = path.relative_to(root).parts[:4]
        if path.name not in FILES:
            continue
        key = (gpu, path.name, engine)
        if key not in newest or _version_key(version) > _version_key(newest[key].parent.name):
            newest[key] = path
    out: dict[tuple[str, str, str], Callable[[], KernelTable]] = {}
    for (gpu, name, engine), path in sorted(newest.items()):
        engines = ENGINES if name.startswith("wideep_deepep") else (engine,)
        for op, rename, lat, scale in FILES[name]:
            for eng in engines:
                out[(gpu, eng, op)] = partial(
                    _read, path, op, rename, lat, scale, gpu, eng, path.parent.name
                )
    return out


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


@cache
def kernel_db() -> KernelDB:
    """The process-wide kernel database (tables read once, models built on first use)."""
    return KernelDB(LazyTables(table_loaders()), table_devices(), read_errors())
