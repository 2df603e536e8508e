"""Query columns of a kernel-database question, checked: defaults filled, dtype aliases
resolved, every number finite and positive (``step`` and ``window_size`` may be zero), one
:class:`MoeplanError` line naming the column, the value and the rule."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from moeplan.cost.kerneldb.families import DTYPE_ALIASES, Family
from moeplan.cost.kerneldb.family import TABLE_COLS
from moeplan.errors import MoeplanError

_MAY_BE_ZERO = ("step", "window_size")


def normalize(fam: Family, columns: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
    """Columns with defaults filled, dtype aliases resolved and values checked (one line)."""
    cols = {k: np.atleast_1d(np.asarray(v)) for k, v in columns.items()}
    lens = {len(v) for v in cols.values()}
    n = lens.pop() if len(lens) == 1 else 0
    if n == 0:
        raise MoeplanError(f"{fam.op} columns must be non-empty and of equal length")
    for c, v in fam.defaults.items():
        cols.setdefault(c, np.full(n, v))
    need = [c for c in fam.columns if c not in TABLE_COLS]
    missing = [c for c in need if c not in cols]
    if missing:
        raise MoeplanError(f"{fam.op} needs column(s) {', '.join(missing)}")
    for c in need:
        a = cols[c]
        if a.dtype.kind in "iuf" and n == 1:  # one row (the memoised scalar path): no arrays
            x = float(a[0])
            if not (math.isfinite(x) and (x >= 0 if c in _MAY_BE_ZERO else x > 0)):
                rule = ">= 0" if c in _MAY_BE_ZERO else "> 0"
                raise MoeplanError(f"{fam.op}.{c} ({x:g}) must be finite and {rule}")
        elif a.dtype.kind in "iuf":
            v = a.astype(float)
            floor_ok = v >= 0 if c in _MAY_BE_ZERO else v > 0
            if not np.all(np.isfinite(v) & floor_ok):
                bad = v[~(np.isfinite(v) & floor_ok)][0]
                rule = ">= 0" if c in _MAY_BE_ZERO else "> 0"
                raise MoeplanError(f"{fam.op}.{c} ({bad:g}) must be finite and {rule}")
        elif c not in fam.variant_cols and c != "distribution":
            raise MoeplanError(f"{fam.op}.{c} ({str(a[0])!r}) must be a number")
        elif c.endswith("dtype"):  # each distinct name resolved once (a column repeats one)
            first = str(a[0])
            if bool((a == a[0]).all()):  # one name (the usual query): no sort
                cols[c] = np.full(n, DTYPE_ALIASES.get(first, first))
                continue
            names, at = np.unique(a.astype(str), return_inverse=True)
            cols[c] = np.array([DTYPE_ALIASES.get(x, x) for x in names.tolist()])[at]
    return cols, n
