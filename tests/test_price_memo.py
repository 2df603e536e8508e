"""A variant's kept prices (``cost/kerneldb/price_memo.py``) are its pricing's own, bit for
bit: asked again, in another order, read back from the store's file, past the row cap; a
residual field builds its k-d tree on first use (the oracle: a brute-force neighbour
search), so a run whose every row was kept imports no SciPy spatial module."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from moeplan.cost.kerneldb import fit
from moeplan.cost.kerneldb.fit import ResidualField
from moeplan.kernel_store import _pack, _unpack


def brute_query(f: ResidualField, q: np.ndarray) -> tuple[np.ndarray, ...]:
    """The oracle: every row's distance, the k nearest by sorting (no ties: random floats)."""
    qq = np.array(q, dtype=float)
    for a in f.carry:
        qq[:, a] = np.clip(qq[:, a], f.lo[a] + 2e-9, f.hi[a] - 2e-9)
    dist = np.sqrt((((qq[:, None, :] - f.coords[None]) * f.weights) ** 2).sum(axis=2))
    j = np.argsort(dist, axis=1)[:, : fit.NEIGHBOURS]
    d = np.take_along_axis(dist, j, 1)
    w = 1.0 / (d + fit.SOFTEN) ** 2
    r = f.residual[j]
    corr = fit._weighted_median(r, w) if f.robust else (r * w).sum(axis=1) / w.sum(axis=1)
    near = np.sqrt(((f.coords[j] - qq[:, None, :]) ** 2).sum(axis=2)).min(axis=1)
    inside = np.all((qq >= f.lo) & (qq <= f.hi), axis=1) & (near <= fit.NEAR)
    return corr, near, inside


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), robust=st.booleans(), carry=st.sampled_from([(), (2,)]))
def test_the_field_built_on_first_use_finds_the_nearest_rows(seed, robust, carry):
    rng = np.random.default_rng(seed)
    f = ResidualField(rng.uniform(0, 12, size=(200, 3)), rng.normal(0, 0.3, 200), (1.0, 2.0),
                      robust, carry)  # fmt: skip
    assert f not in fit._TREES  # nothing built until asked
    q = rng.uniform(-3, 15, size=(30, 3))
    got = f.query(q)
    assert f in fit._TREES
    want = brute_query(f, q)
    assert np.allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    assert np.allclose(got[1], want[1], rtol=1e-12, atol=1e-12)
    assert np.array_equal(got[2], want[2])


def test_the_console_script_keeps_rows_for_its_next_run(tmp_path):
    """Two runs of one command print the same answer; the second reads the rows the first
    kept and imports no k-d tree (``python -X importtime`` lists every import)."""
    args = [sys.executable, "-X", "importtime", "-m", "moeplan", "bench", "--launch",
            "vllm serve openai/gpt-oss-20b", "--cluster", "h100-sxm-8",
            "--num-prompts", "64", "--random-input-len", "300", "--random-output-len", "40",
            "--json"]  # fmt: skip
    env = {**os.environ, "MOEPLAN_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run(args, capture_output=True, text=True, env=env, check=True)
            for _ in range(2)]  # fmt: skip
    assert runs[0].stdout == runs[1].stdout
    assert ["scipy.spatial" in r.stderr for r in runs] == [True, False]


# ---- a variant's own prices (price_memo) ------------------------------------------------


def device(name: str):
    from moeplan.cost.kerneldb.device import Device

    return Device(name=name, flops_bf16=1e15, flops_fp8=2e15, mem_bw=3e12, link_bw=4e11,
                  reference="h100_sxm", sm_count=132, table="h100_sxm")  # fmt: skip


class Stub:
    """A variant stand-in (kept answers hang on any object)."""


def stub_price(calls):
    """Seconds from the row's columns, the source by parity: a pure function of each row."""

    def price(cols, n):
        calls.append(n)
        s = cols["a"] * 1.5 + np.sqrt(cols["b"])
        src = np.where(cols["a"] % 2 == 0, "measured", "interpolated").astype(object)
        det = np.array([f"{cols['k'][0]} row" for _ in range(n)], dtype=object)
        return s.astype(float), src, det

    return price


def test_kept_prices_are_the_pricing_and_are_asked_once():
    from moeplan.cost.kerneldb import price_memo

    dev = device("gpu")
    vm, calls = Stub(), []
    price = stub_price(calls)
    rng = np.random.default_rng(0)
    a, b = rng.integers(1, 30, 40), rng.uniform(1, 9, 40)
    cols = {"a": a, "b": b, "k": np.array(["x"] * 40)}
    want = price(dict(cols), 40)
    calls.clear()
    got = price_memo.priced(vm, dev, cols, 40, price)
    assert all(np.array_equal(x, y) for x, y in zip(got, want, strict=True))
    sub = {c: v[5:25][::-1] for c, v in cols.items()}  # every row kept: nothing priced
    got = price_memo.priced(vm, dev, sub, 20, price)
    assert calls == [40] and np.array_equal(got[0], want[0][5:25][::-1])
    more = {c: np.concatenate([v[:3], v[:3]]) for c, v in cols.items()}
    more["a"] = more["a"] + np.array([0, 0, 0, 100, 100, 100])
    got = price_memo.priced(vm, dev, more, 6, price)  # three kept, three new
    assert calls == [40, 3] and np.array_equal(got[0], price(dict(more), 6)[0])
    calls.clear()
    last = {c: np.concatenate([cols[c][:4], cols[c][:1] + 1000]) for c in ("a", "b")}
    last["k"] = cols["k"][:5]
    price_memo.priced(vm, dev, last, 5, price)  # one row new in a longer query
    assert calls == [2]  # priced as two rows (the vector path), never as one
    calls[:] = [40, 3]
    # the kept answers travel with the variant (a stored file) and answer without pricing
    kept = price_memo.stored(vm)
    assert kept is not None and price_memo.stored(vm) is None  # nothing new the second time
    assert price_memo.memo_ok(kept)
    vm2 = Stub()
    assert price_memo.attach(vm2, _unpack(_pack(kept)))
    calls.clear()
    got = price_memo.priced(vm2, dev, cols, 40, price)
    assert calls == [] and all(np.array_equal(x, y) for x, y in zip(got, want, strict=True))
    # another device, another text value, a varying text column, one row: priced afresh
    other = device("gpu2")
    price_memo.priced(vm2, other, cols, 40, price)
    price_memo.priced(vm2, dev, {**cols, "k": np.array(["y"] * 40)}, 40, price)
    mixed = {**cols, "k": np.array(["x", "y"] * 20)}
    price_memo.priced(vm2, dev, mixed, 40, price)
    price_memo.priced(vm2, dev, mixed, 40, price)  # not kept: priced again
    one = {c: v[:1] for c, v in cols.items()}
    price_memo.priced(vm2, dev, one, 1, price)  # a kept row, but the scalar path's own
    price_memo.priced(vm2, dev, one, 1, price)  # kept now
    assert calls == [40, 40, 40, 40, 1]


def test_a_kept_whole_number_is_not_the_same_float():
    """A measured row is found by its text (1 and 1.0 differ there): the two dtypes keep
    apart."""
    from moeplan.cost.kerneldb import price_memo

    dev = device("gpu")
    vm, calls = Stub(), []
    price = stub_price(calls)
    cols = {"a": np.arange(1, 5), "b": np.ones(4), "k": np.array(["x"] * 4)}
    price_memo.priced(vm, dev, cols, 4, price)
    price_memo.priced(vm, dev, {**cols, "a": cols["a"].astype(float)}, 4, price)
    assert calls == [4, 4]


def test_past_the_cap_prices_are_priced_not_kept(monkeypatch):
    from moeplan.cost.kerneldb import price_memo

    monkeypatch.setattr(price_memo, "MEMO_MAX_ROWS", 7)
    dev = device("gpu")
    vm, calls = Stub(), []
    price = stub_price(calls)
    cols = {"a": np.arange(1, 21), "b": np.ones(20), "k": np.array(["x"] * 20)}
    want = price(dict(cols), 20)
    for _ in range(2):
        got = price_memo.priced(vm, dev, cols, 20, price)
        assert all(np.array_equal(x, y) for x, y in zip(got, want, strict=True))
    assert calls == [20, 20, 13]
    assert sum(len(s) for s in price_memo.stored(vm)["secs"]) == 7


def test_malformed_kept_prices_are_refused():
    from moeplan.cost.kerneldb.price_memo import memo_ok

    good = {"spaces": ["s"], "labels": [["measured", "d"]], "keys": [np.zeros((2, 3))],
            "secs": [np.ones(2)], "codes": [np.zeros(2, dtype=np.int64)]}  # fmt: skip
    assert memo_ok(good)
    assert memo_ok({"spaces": [], "labels": [], "keys": [], "secs": [], "codes": []})
    for name, bad in [("codes", [np.array([0, 1])]), ("secs", [np.ones(3)]),
                      ("secs", [np.array([1.0, np.nan])]), ("secs", [-np.ones(2)]),
                      ("keys", [np.zeros((2, 3), dtype=np.float32)]),
                      ("labels", [["measured"]]), ("spaces", ["s", "t"]),
                      ("codes", [np.zeros(2)])]:  # fmt: skip
        assert not memo_ok({**good, name: bad}), name
    for bad in (None, 7, [], {k: v for k, v in good.items() if k != "labels"}):
        assert not memo_ok(bad)


def test_kernel_prices_answered_twice_are_the_same(tmp_path):
    """The real database: a decode-attention grid priced, then asked again in another
    order and through a stored copy of its variant — every second answer is the first."""
    from moeplan.cost.kerneldb.device import Device
    from moeplan.kernel_tables import kernel_db, table_devices

    db = kernel_db("vllm", "0.11.0")
    dev: Device = table_devices()["h100_sxm"]
    n = 300
    cols = {"batch_size": np.full(n, 96), "isl": np.ones(n, dtype=int),
            "num_heads": np.full(n, 32), "num_key_value_heads": np.full(n, 4),
            "head_dim": np.full(n, 128), "step": np.arange(0, 30 * n, 30)}  # fmt: skip
    first = db.seconds_many("generation_attention", dev, "vllm", cols)
    again = db.seconds_many(
        "generation_attention", dev, "vllm", {c: v[::-1] for c, v in cols.items()}
    )
    assert np.array_equal(first, again[::-1])
    from moeplan.cost.kerneldb import price_memo

    for key, vm in list(db._variants.items()):
        if vm is not None and key[2] == "generation_attention":
            kept = price_memo.stored(vm)
            copy_of = _unpack(_pack(vm))  # a variant read back, with its answers' file
            assert kept is None or price_memo.attach(copy_of, _unpack(_pack(kept)))
            db._variants[key] = copy_of
    third = db.seconds_many("generation_attention", dev, "vllm", cols)
    assert np.array_equal(first, third)


def test_kept_answers_travel_in_their_own_file_and_bad_ones_are_ignored():
    """``stored`` / ``attach``: a copy of the variant, given the stored answers, answers the
    same rows without pricing; a value of another shape is a miss."""
    from moeplan.cost.kerneldb import price_memo
    from moeplan.kernel_tables import kernel_db, table_devices

    db = kernel_db("vllm", "0.11.0")
    dev = table_devices()["h100_sxm"]
    cols = {"batch_size": np.full(50, 40), "isl": np.ones(50, dtype=int),
            "num_heads": np.full(50, 16), "num_key_value_heads": np.full(50, 2),
            "head_dim": np.full(50, 128), "step": np.arange(7, 7 + 50 * 41, 41)}  # fmt: skip
    want = db.seconds_many("generation_attention", dev, "vllm", cols)
    (vk,) = [k for k, v in db._variants.items() if v is not None and k[2] ==
             "generation_attention" and k[0] == "h100_sxm"][:1]  # fmt: skip
    vm = db._variants[vk]
    kept = price_memo.stored(vm)
    assert kept is not None and price_memo.stored(vm) is None  # nothing new the second time
    back = _unpack(_pack(kept))
    fresh = copy.deepcopy(vm)  # a variant read back: nothing kept yet
    for bad in (None, 7, {**back, "secs": [np.ones(3)]}, {**back, "codes": [np.ones(2)]},
                {k: v for k, v in back.items() if k != "labels"}):  # fmt: skip
        assert not price_memo.attach(copy.deepcopy(fresh), bad)
    assert price_memo.attach(fresh, back)
    calls = []

    def never(c, m):
        calls.append(m)
        raise AssertionError("priced a kept row")

    got = price_memo.priced(fresh, dev, _normalized(cols), 50, never)
    assert calls == [] and np.array_equal(got[0], want)


def _normalized(cols):
    from moeplan.cost.kerneldb import KERNEL_FAMILIES
    from moeplan.cost.kerneldb.normalize import normalize

    return normalize(KERNEL_FAMILIES["generation_attention"], cols)[0]
