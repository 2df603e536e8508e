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


def shape_keys(file_name: str, cols: Mapping[str, np.ndarray], names: Sequence[str]) -> list[str]:
    """Each row's shape key: ``file_name`` then ``column=value`` of ``names`` (sorted)."""
    n = len(next(iter(cols.values()))) if cols else 0
    if not names:
        return [file_name] * n
    vals = [np.asarray(cols[c]).astype(str) for c in names]
    return [
        file_name + "|" + "|".join(f"{c}={v[i]}" for c, v in zip(names, vals, strict=True))
        for i in range(n)
    ]


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
