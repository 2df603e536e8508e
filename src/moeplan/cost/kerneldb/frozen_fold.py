"""The frozen test fold of the kernel tables: rows no development step may read.

The five seeded folds of :mod:`.evaluate` are *development* error: they were read while
features, transfer rules and constants were chosen, so they measure how well the model fits
the tables it was shaped on. A test error needs rows that no development step has seen. This
module fixes that fold, before any of these tables is used:

- **Tables**: the kernel tables not used for development when the fold was frozen —
  every table of the B200 and GB200 (``b200_sxm``, ``gb200``) and the H100 tables of the
  older engine versions (SGLang 0.5.6.post2 and 0.5.9, vLLM 0.14.0 and 0.19.0), except
  the two wide-EP MLP tables of SGLang 0.5.6.post2 that the shared-expert price already
  reads (:data:`DEVELOPED`).
- **Rows**: whole shapes, as the development folds hold them out. A row's shape key is its
  table file name and its value in every integer, string or boolean column other than the
  token axes (:data:`TOKEN_AXES`: every token count of a shape leaves with it) and the expert
  load (``distribution``: a layer's balanced and power-law rows leave together); floating
  point columns are measurements. The row is in the test fold when the first eight bytes of
  the SHA-256 of that key, read as a big-endian integer, are :data:`RESIDUE` modulo
  :data:`MODULUS` — about one shape in five, fixed by the data alone (no seed, no row order).

:func:`moeplan.kernel_tables.table_loaders` drops the test-fold rows of every frozen table
it reads, so fits, residual fields, the development folds and every price see only the other
rows; :func:`moeplan.kernel_tables.frozen_test_rows` is the one reader of the test rows.
``src/moeplan/data/test_fold.json`` records the rule and, per table, its rows and test rows
(``bench/freeze_test_fold.py`` writes and checks it; tests/test_kerneldb_test_fold.py checks it on
the tables the package ships). Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

MODULUS = 5
RESIDUE = 0
#: GPUs whose every table is frozen
FROZEN_GPUS = ("b200_sxm", "gb200")
#: (GPU, engine, version) of the other frozen tables
FROZEN_VERSIONS = (
    ("h100_sxm", "sglang", "0.5.6.post2"),
    ("h100_sxm", "sglang", "0.5.9"),
    ("h100_sxm", "vllm", "0.14.0"),
    ("h100_sxm", "vllm", "0.19.0"),
)
#: tables of the frozen versions already read for development when the fold was frozen
#: (paths relative to the kernel-table root): not frozen
DEVELOPED = (
    "h100_sxm/mlp/sglang/0.5.6.post2/wideep_context_mlp_perf.parquet",
    "h100_sxm/mlp/sglang/0.5.6.post2/wideep_generation_mlp_perf.parquet",
)
#: per-call size columns of the tables: every value of them belongs to one shape
TOKEN_AXES = frozenset(
    {
        "batch_size",
        "dp_num_tokens",
        "global_num_tokens",
        "isl",
        "m",
        "message_size",
        "num_token",
        "num_tokens",
        "rank0_num_tokens",
        "seq_len",
        "step",
    }
)
LOAD_COLUMNS = frozenset({"distribution"})
RULE = (
    "tables: every b200_sxm and gb200 table, and the h100_sxm tables of SGLang 0.5.6.post2 / "
    "0.5.9 and vLLM 0.14.0 / 0.19.0 except the tables listed as developed; rows: shape key = "
    "table file name + (column, value) of every integer, string or boolean column but the token "
    "axes and distribution, sorted by column; a row is in the test fold when int.from_bytes("
    "sha256(key)[:8], 'big') % 5 == 0"
)


def frozen_table(relpath: str) -> bool:
    """Whether the table at ``relpath`` (``gpu/op/engine/version/file``, relative to the
    kernel-table root) has a frozen test fold."""
    parts = relpath.replace("\\", "/").split("/")
    if len(parts) != 5 or relpath in DEVELOPED:
        return False
    gpu, _, engine, version, _ = parts
    return gpu in FROZEN_GPUS or (gpu, engine, version) in FROZEN_VERSIONS


def key_columns(names: Sequence[str], kinds: Sequence[str]) -> tuple[str, ...]:
    """The shape-key columns of a table with columns ``names`` of kinds ``kinds`` (numpy
    kind letters: ``i``/``u`` integer, ``U``/``S``/``O`` string, ``b`` boolean), sorted."""
    return tuple(
        sorted(
            n
            for n, k in zip(names, kinds, strict=True)
            if k in "iuUSOb" and n not in TOKEN_AXES and n not in LOAD_COLUMNS
        )
    )


#: a key column: its values per row, or its distinct values and each row's index into them
Column = np.ndarray | tuple[np.ndarray, np.ndarray]


def shape_index(
    file_name: str, cols: Mapping[str, Column], names: Sequence[str], rows: int | None = None
) -> tuple[list[str], np.ndarray]:
    """The distinct shape keys of a table's rows and each row's index into them.

    A key is ``file_name`` then ``column=value`` of ``names`` (sorted), each value written
    as ``numpy.ndarray.astype(str)`` writes it. The rows are factorised column by column and
    a key string is built once per distinct shape, not per row: a table holds hundreds of
    rows (token counts, loads) per shape. ``rows``: the row count, for a table without key
    columns (else the length of the columns)."""
    coded = [_codes(cols[c]) for c in names]
    n = len(coded[0][1]) if coded else rows if rows is not None else _rows(cols)
    words, codes = [], []
    shape = np.zeros(n, np.int64)
    distinct = 1
    for values, code in coded:
        words.append(np.asarray(values).astype(str))
        codes.append(code)
        # distinct (shape so far, value) pairs, renumbered 0..k-1 so the code stays below n
        shape, distinct = _dense(shape * len(values) + code, distinct * len(values))
    first = np.zeros(distinct, np.intp)
    first[shape] = np.arange(n)  # a row of each shape (every row of a shape has its values)
    keys = [
        "|".join([file_name, *(f"{c}={w[k[r]]}" for c, w, k in zip(names, words, codes, strict=True))])
        for r in first.tolist()
    ] if names else [file_name]  # fmt: skip
    return keys, shape.astype(np.intp, copy=False)


def _rows(cols: Mapping[str, Column]) -> int:
    col = next(iter(cols.values()), np.zeros(0))
    return len(col[1] if isinstance(col, tuple) else col)


def _codes(col: Column) -> tuple[np.ndarray, np.ndarray]:
    """A key column as its distinct values and each row's index into them (``np.unique``;
    a column of Python objects, such as one with missing values, by equality)."""
    if isinstance(col, tuple):
        return col
    values = np.asarray(col)
    if values.dtype.kind != "O":
        uniq, code = np.unique(values, return_inverse=True)
        return uniq, code.reshape(-1)
    seen: dict[object, int] = {}
    code = np.fromiter(
        (seen.setdefault(v, len(seen)) for v in values.tolist()), np.intp, len(values)
    )
    uniq = np.empty(len(seen), object)
    uniq[:] = list(seen)
    return uniq, code


def _dense(code: np.ndarray, bound: int) -> tuple[np.ndarray, int]:
    """``code`` (values in ``[0, bound)``) renumbered to ``0..k-1`` in order, and ``k``:
    by a presence table when ``bound`` is small against the rows, else by sorting."""
    if bound <= 4 * len(code) + 4096:
        present = np.zeros(bound, bool)
        present[code] = True
        rank = np.cumsum(present) - 1
        return rank[code], int(present.sum())
    uniq, inverse = np.unique(code, return_inverse=True)
    return inverse.reshape(-1), len(uniq)


def shape_keys(file_name: str, cols: Mapping[str, Column], names: Sequence[str]) -> list[str]:
    """Each row's shape key (:func:`shape_index`, one entry per row)."""
    keys, index = shape_index(file_name, cols, names)
    return [keys[i] for i in index.tolist()]


def fold_mask(
    file_name: str, cols: Mapping[str, Column], names: Sequence[str], rows: int | None = None
) -> np.ndarray:
    """Boolean mask of a table's rows in the test fold, hashing each distinct shape once."""
    keys, index = shape_index(file_name, cols, names, rows)
    return in_test_fold(keys)[index]


def in_test_fold(keys: Sequence[str]) -> np.ndarray:
    """Boolean mask of the rows whose shape key falls in the test fold."""
    memo: dict[str, bool] = {}
    out = np.zeros(len(keys), bool)
    for i, k in enumerate(keys):
        if k not in memo:
            h = int.from_bytes(hashlib.sha256(k.encode()).digest()[:8], "big")
            memo[k] = h % MODULUS == RESIDUE
        out[i] = memo[k]
    return out


def fold_digest(keys: Sequence[str]) -> str:
    """SHA-256 of the sorted distinct test-fold shape keys (the manifest's fingerprint)."""
    return hashlib.sha256("\n".join(sorted(set(keys))).encode()).hexdigest()
