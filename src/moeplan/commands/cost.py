"""``moeplan cost``'s answer: one kernel's predicted time per shape, with its source and
held-out error, for the shapes of flags or a Parquet/CSV table (columns as in NVIDIA's
measured tables), on a cluster's or a GPU preset's device.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.cost.kerneldb import Device, Prediction, device_for
from moeplan.errors import MoeplanError
from moeplan.specs import cluster_names, cluster_table, load_cluster

#: the busiest rank's load columns :func:`with_counts` adds (priced with the shape)
RANK_LOAD_COLS = ("rank_pairs", "rank_hit")


def kernel_device(cluster: str | None, gpu: str | None) -> tuple[Device, str]:
    """The device priced (``--cluster`` or ``--gpu``, default h100-sxm-8) and its words."""
    if cluster and gpu:
        raise MoeplanError("give --cluster or --gpu, not both")
    if gpu:
        for name in cluster_names():
            c = load_cluster(name)
            if c.gpu.name == gpu:
                return device_for(c), f"{gpu} (links of cluster {name})"
        raise MoeplanError(
            f"gpu ({gpu!r}) is not a GPU preset; choose one of "
            f"{', '.join(sorted(cluster_table()['gpus']))}"
        )
    name = cluster or "h100-sxm-8"
    return device_for(load_cluster(name)), f"{load_cluster(name).gpu.name} (cluster {name})"


def read_table(path: str) -> dict[str, np.ndarray]:
    """The shapes of a Parquet or CSV table, one array per column."""
    p = Path(path)
    if not p.is_file():
        raise MoeplanError(f"table ({path!r}) does not exist")
    try:
        if p.suffix.lower() == ".csv":
            import pyarrow.csv as pcsv

            t = pcsv.read_csv(p)
        else:
            import pyarrow.parquet as pq

            t = pq.read_table(p)
    except Exception as err:  # pyarrow raises several types for bad files
        raise MoeplanError(
            f"table {path} could not be read: {' '.join(str(err).split())}"
        ) from None
    if t.num_rows == 0:
        raise MoeplanError(f"table {path} has no rows")
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}


def require_topk_fits(cols: dict[str, np.ndarray]) -> None:
    """A token cannot pick more distinct experts than there are (moe ``topk``, deepep
    ``num_topk``): refuse such a row instead of pricing it."""
    for k in ("topk", "num_topk"):
        if k in cols and "num_experts" in cols:
            top, num = np.asarray(cols[k], float), np.asarray(cols["num_experts"], float)
            bad = np.flatnonzero(top > num)
            if bad.size:
                i = int(bad[0])
                raise MoeplanError(
                    f"--{k.replace('_', '-')} ({top[i]:g}) must be <= --num-experts "
                    f"({num[i]:g}): a token picks distinct experts"
                )


def with_counts(op: str, flags: dict, path: str, redundant: int, eplb: bool) -> dict:
    """Shape flags + the busiest rank's load from per-expert counts (a routing trace)."""
    import json

    from moeplan.cost.kerneldb.pricing import explicit_load

    if op != "moe":
        raise MoeplanError(f"--expert-counts applies to moe, not {op}")
    if redundant < 0:
        raise MoeplanError(f"redundant_experts ({redundant}) must be >= 0")
    if "topk" not in flags:
        raise MoeplanError("--expert-counts needs --topk")
    inline = path.lstrip().startswith("[")  # a JSON list given on the command line
    if not inline:  # a regular file (a FIFO would block the read forever)
        from moeplan.io import check_regular_file

        check_regular_file(path, "--expert-counts")
    try:
        counts = json.loads(path if inline else Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        what = "--expert-counts" if inline else f"expert counts {path}"
        raise MoeplanError(f"{what} could not be read as JSON: {err}") from None
    if not isinstance(counts, list) or not all(isinstance(c, int | float) for c in counts):
        raise MoeplanError(f"expert counts {path} must be a JSON list of numbers")
    load = explicit_load(
        np.asarray(counts, float),
        int(flags["topk"]),
        int(flags.get("moe_ep_size", 1)),
        redundant,
        eplb,
    )
    for key in ("num_experts", "num_tokens"):
        if key in flags and float(flags[key]) != float(load[key]):  # type: ignore[arg-type]
            raise MoeplanError(
                f"--{key.replace('_', '-')} ({flags[key]}) disagrees with "
                f"--expert-counts ({load[key]:g})"
            )
    if "distribution" in flags:
        raise MoeplanError("--distribution and --expert-counts exclude each other")
    return {**flags, **load}


def predictions_parquet(path: str, cols: dict[str, np.ndarray], preds: list[Prediction]) -> bytes:
    """The table ``--out`` writes: the shapes with ``predicted_ms``, ``source`` and the
    errors added, as Parquet bytes (``path`` must end in ``.parquet``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.endswith(".parquet"):
        raise MoeplanError(f"out ({path!r}) must end in .parquet")
    data = {c: np.asarray(v) for c, v in cols.items()}
    data["predicted_ms"] = np.array([p.seconds * 1e3 for p in preds])
    data["source"] = np.array([p.source for p in preds])
    data["error_median"] = np.array([np.nan if p.error is None else p.error for p in preds])
    data["error_p90"] = np.array([np.nan if p.error_p90 is None else p.error_p90 for p in preds])
    buf = io.BytesIO()
    pq.write_table(pa.table(data), buf)
    return buf.getvalue()


def prediction_rows(cols: dict[str, np.ndarray], preds: list[Prediction]) -> list[dict[str, Any]]:
    """The ``--json`` rows: each shape's columns, its prediction, source and errors."""
    rows = []
    for i, p in enumerate(preds):
        r = {
            c: np.asarray(cols[c])[i].item()
            if hasattr(np.asarray(cols[c])[i], "item")
            else cols[c][i]
            for c in cols
        }
        r.update(
            predicted_ms=p.seconds * 1e3,
            source=p.source,
            error_median=p.error,
            error_p90=p.error_p90,
            detail=p.detail,
        )
        rows.append(r)
    return rows


def cost_price_sources(op: str, preds: list[Prediction]) -> dict[str, dict[str, Any]]:
    """``price_sources`` of the predicted seconds (all rows together): each row is one price
    of one source, so one shape's source carries share 1."""
    from moeplan.cost.price_keys import price_key
    from moeplan.cost.price_sources import summarize

    keys = [price_key(op, p) for p in preds]
    parts = [{k: p.seconds} for k, p in zip(keys, preds, strict=True)]
    return summarize(([p.seconds for p in preds], parts, dict(zip(keys, preds, strict=True))))


def shape_columns(pairs: list[str], flags: dict) -> dict[str, object]:
    """``--col NAME=VALUE`` pairs as columns (numbers where they parse as numbers)."""
    out: dict[str, object] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name or not value:
            raise MoeplanError(f"--col ({pair!r}) must be NAME=VALUE")
        if name in flags or name in out:
            raise MoeplanError(f"--col {name} is given twice")
        try:
            out[name] = int(value)
        except ValueError:
            try:
                out[name] = float(value)
            except ValueError:
                out[name] = value
    return out


def check_kernel_source(db: Any, engine: str, op: str, cols: dict[str, np.ndarray]) -> None:
    """One line when a ``kernel_source`` asked for is no kernel measured for ``op`` under
    ``engine`` on any GPU (an unknown name would be priced as another kernel's transfer)."""
    if "kernel_source" not in cols:
        return
    from moeplan.cost.kerneldb import KERNEL_FAMILIES

    cols_of = KERNEL_FAMILIES[op].variant_cols
    known = {
        dict(zip(cols_of, key, strict=True)).get("kernel_source")
        for gpu, e, o in db.tables
        if e == engine and o == op
        for key in db.variants(gpu, e, o)
    }
    for v in {str(x) for x in np.asarray(cols["kernel_source"]).ravel()}:
        if v not in known:
            names = ", ".join(sorted(k for k in known if k)) or "none"
            raise MoeplanError(f"--kernel-source ({v!r}) must be a kernel measured for {op} "
                               f"under {engine}: {names}")  # fmt: skip
