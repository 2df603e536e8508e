"""Kept answers of a variant's own prices (:meth:`.db.KernelDB._own_prices`; no I/O).

A row priced on its table GPU — exact row, shape line, line end, residual field, model — is
a function of the variant, the asking device and that row's columns alone (the rows of one
query are priced independently: :mod:`moeplan.cost.prefetch`). So a variant keeps every
answer it gave (seconds, source, detail) under the row's numeric columns, in a *space*
named by the device, the numeric columns' names and dtype kinds (a whole number and the same
float are different keys: a measured row is looked up by its text) and the text columns'
values (one value per column in a kept query; a query whose text column varies is not
kept). The answers live beside the variant while the process runs, and the variant's store
(:mod:`moeplan.kernel_store`) keeps them in a file beside the variant's (:func:`stored`,
:func:`attach`), so a later process answers the same rows without the look-ups, the
features, the model and the neighbour search. A one-row query takes the scalar path
(:func:`.rows.own_rows`), whose floats need not be the vector path's bit for bit, so one-row
answers are kept in spaces of their own and answer one-row queries only; a single row
missing from a longer query is priced as two (itself twice), on the vector path. At most
:data:`MEMO_MAX_ROWS` rows are kept per variant.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from moeplan.cost.kerneldb.device import Device

#: answers a variant keeps at most (over all its spaces); past it rows are priced, not kept.
#: 250,000 rows of 8 columns are about 20 MB of its stored file.
MEMO_MAX_ROWS = 250_000

Priced = tuple[np.ndarray, np.ndarray, np.ndarray]


def row_bytes(x: np.ndarray) -> list[bytes]:
    """Each row of a C-contiguous 2-d array as its bytes (a dict key)."""
    if len(x) == 0:
        return []
    return x.view(np.dtype((np.void, x.shape[1] * x.itemsize))).ravel().tolist()


def _space(device: Device, cols: Mapping[str, np.ndarray], n: int) -> tuple[str, list[str]] | None:
    """The space of a query of ``n`` rows and its numeric columns; ``None`` when a text
    column varies."""
    nums, texts = [], []
    for c in sorted(cols):
        a = cols[c]
        if a.dtype.kind in "biuf":
            nums.append(c)
            continue
        first = a[0]
        if not bool(np.all(a == first)):
            return None
        texts.append(f"{c}={first}")
    kinds = ",".join(f"{c}:{cols[c].dtype.kind}" for c in nums)
    path = "scalar" if n == 1 else "vector"
    return f"{device!r}|{kinds}|{';'.join(texts)}|{path}", nums


class _Space:
    """One space's kept rows: their index, seconds and label codes (in index order), and the
    keys kept since the variant was read."""

    __slots__ = ("index", "secs", "codes", "keys", "new_keys")

    def __init__(self, keys: np.ndarray | None, secs: np.ndarray | None,
                 codes: np.ndarray | None) -> None:  # fmt: skip
        self.keys = keys
        self.index: dict[bytes, int] = (
            {} if keys is None else dict(zip(row_bytes(keys), range(len(keys)), strict=True))
        )
        self.secs: list[float] = [] if secs is None else secs.tolist()
        self.codes: list[int] = [] if codes is None else codes.tolist()
        self.new_keys: list[np.ndarray] = []

    def joined_keys(self) -> np.ndarray | None:
        """Every kept row's key columns, in index order."""
        parts = ([self.keys] if self.keys is not None else []) + self.new_keys
        if len(parts) > 1:
            self.keys, self.new_keys = np.concatenate(parts), []
        elif parts:
            self.keys, self.new_keys = parts[0], []
        return self.keys


class _State:
    """A variant's kept answers while the process runs (:func:`_state`), from a stored value
    (:func:`stored`) or none."""

    __slots__ = ("spaces", "labels", "label_code", "rows", "grown", "_arrays")

    def __init__(self, value: dict[str, Any] | None = None) -> None:
        v = value or {"spaces": [], "keys": [], "secs": [], "codes": [], "labels": []}
        self.labels: list[tuple[str, str]] = [tuple(p) for p in v["labels"]]
        self.label_code = {p: i for i, p in enumerate(self.labels)}
        self.spaces: dict[str, _Space] = {
            s: _Space(k, t, c)
            for s, k, t, c in zip(v["spaces"], v["keys"], v["secs"], v["codes"], strict=True)
        }
        self.rows = sum(len(t) for t in v["secs"])
        self.grown = False
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def label_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Sources and details by label code (object arrays)."""
        if self._arrays is None or len(self._arrays[0]) != len(self.labels):
            src = np.empty(len(self.labels), dtype=object)
            det = np.empty(len(self.labels), dtype=object)
            for i, (a, b) in enumerate(self.labels):
                src[i], det[i] = a, b
            self._arrays = (src, det)
        return self._arrays


_STATES: weakref.WeakKeyDictionary[Any, _State] = weakref.WeakKeyDictionary()


def run_state(states: weakref.WeakKeyDictionary, owner: Any, make: Callable[[Any], Any]) -> Any:
    """``owner``'s state of this process in ``states`` (made by ``make(owner)`` on first
    use): what a stored object holds only while the process runs."""
    got = states.get(owner)
    if got is None:
        got = states[owner] = make(owner)
    return got


def _state(vm: Any) -> _State:
    return run_state(_STATES, vm, lambda _: _State())


def priced(
    vm: Any,
    device: Device,
    cols: Mapping[str, np.ndarray],
    n: int,
    price: Callable[[dict[str, np.ndarray], int], Priced],
) -> Priced:
    """``price(cols, n)``, with the rows ``vm`` kept answered from its memo and the others
    priced (as one query) and kept (module docstring)."""
    sp = _space(device, cols, n)
    if sp is None:
        return price(dict(cols), n)
    name, nums = sp
    st = _state(vm)
    space = st.spaces.get(name)
    if space is None:
        space = st.spaces[name] = _Space(None, None, None)
    x = np.empty((n, len(nums)))
    for j, c in enumerate(nums):
        x[:, j] = cols[c]
    keys = row_bytes(x)
    at = np.fromiter((space.index.get(k, -1) for k in keys), dtype=np.int64, count=n)
    miss = np.flatnonzero(at < 0)
    secs, codes = np.empty(n), np.empty(n, dtype=np.int64)
    if len(miss) < n:
        hit = np.flatnonzero(at >= 0)
        kept_s, kept_c = space.secs, space.codes
        rows = at[hit].tolist()
        secs[hit] = [kept_s[j] for j in rows]
        codes[hit] = [kept_c[j] for j in rows]
    if len(miss):
        # one row missing from a longer query is priced as two (itself twice): a one-row
        # query would take the scalar path, and this space keeps the vector path's answers
        idx = np.repeat(miss, 2) if len(miss) == 1 < n else miss
        sub = cols if len(idx) == n else {c: np.asarray(a)[idx] for c, a in cols.items()}
        s, src, det = (a[: len(miss)] for a in price(dict(sub), len(idx)))
        got = np.fromiter(
            (_code(st, (a, b)) for a, b in zip(src.tolist(), det.tolist(), strict=True)),
            dtype=np.int64,
            count=len(miss),
        )
        secs[miss], codes[miss] = s, got
        _keep(st, space, [keys[i] for i in miss], x[miss], np.asarray(s, dtype=float), got)
    src_of, det_of = st.label_arrays()
    return secs, src_of[codes], det_of[codes]


def _code(st: _State, label: tuple[str, str]) -> int:
    got = st.label_code.get(label)
    if got is None:
        got = st.label_code[label] = len(st.labels)
        st.labels.append(label)
    return got


def _keep(st: _State, space: _Space, keys: list[bytes], x: np.ndarray, secs: np.ndarray,
          codes: np.ndarray) -> None:  # fmt: skip
    """Keep rows no kept row answered (``keys`` were looked up just before): one of each
    repeated row, up to :data:`MEMO_MAX_ROWS` rows."""
    room = MEMO_MAX_ROWS - st.rows
    if room <= 0:
        return
    first = dict(zip(keys, range(len(keys)), strict=True))  # a repeated row's answer is one
    pick = list(first.values())[:room]
    start = len(space.secs)
    space.index.update(zip(list(first)[:room], range(start, start + len(pick)), strict=True))
    space.secs.extend(secs[pick].tolist())
    space.codes.extend(codes[pick].tolist())
    space.new_keys.append(x[pick])
    st.rows += len(pick)
    st.grown = True


def stored(vm: Any) -> dict[str, Any] | None:
    """What a store keeps of ``vm``'s answers (every kept row, in index order per space);
    ``None`` when none was added since the variant was built or read."""
    st = _STATES.get(vm)
    if st is None or not st.grown:
        return None
    out: dict[str, list[Any]] = {"spaces": [], "keys": [], "secs": [], "codes": []}
    for name, sp in st.spaces.items():
        k = sp.joined_keys()
        if k is None or not len(sp.secs):
            continue
        out["spaces"].append(name)
        out["keys"].append(k)
        out["secs"].append(np.asarray(sp.secs, dtype=np.float64))
        out["codes"].append(np.asarray(sp.codes, dtype=np.int64))
    st.grown = False
    return {**out, "labels": [list(p) for p in st.labels]}


def memo_ok(value: Any) -> bool:
    """``value`` has the shape :func:`stored` writes (anything else is a cache miss)."""
    names = ("spaces", "keys", "secs", "codes", "labels")
    if not isinstance(value, dict) or set(value) != set(names):
        return False
    spaces, labels = value["spaces"], value["labels"]
    lists = (value["keys"], value["secs"], value["codes"])
    if type(spaces) is not list or not all(
        type(v) is list and len(v) == len(spaces) for v in lists
    ):
        return False
    if not all(type(s) is str for s in spaces) or len(set(spaces)) != len(spaces):
        return False
    if type(labels) is not list or not all(
        type(p) is list and len(p) == 2 and all(type(t) is str for t in p) for p in labels
    ):
        return False
    for k, s, c in zip(*lists, strict=True):
        ok = (
            isinstance(k, np.ndarray) and k.dtype == np.float64 and k.ndim == 2
            and isinstance(s, np.ndarray) and s.dtype == np.float64 and s.shape == (len(k),)
            and isinstance(c, np.ndarray) and c.dtype == np.int64 and c.shape == (len(k),)
            and bool(np.all((c >= 0) & (c < len(labels))))
            and bool(np.all(np.isfinite(k))) and bool(np.all(np.isfinite(s) & (s > 0)))
        )  # fmt: skip
        if not ok:
            return False
    return True


def attach(vm: Any, value: Any) -> bool:
    """Give ``vm`` (just built or read, nothing asked yet) the answers a store kept for it
    (:func:`stored`); a value not of that shape is ignored (a cache miss). Whether any were
    attached."""
    if vm in _STATES or not memo_ok(value):
        return False
    _STATES[vm] = _State(value)
    return True
