"""A residual field's kept answers (``ResidualField`` memo) are its neighbour search's own,
bit for bit: asked again, read back from a stored variant, or past the row cap; and a field
whose every row is kept builds no k-d tree (the oracle: a fresh field's search)."""

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


def field_of(seed: int, robust: bool, carry: tuple[int, ...]) -> ResidualField:
    rng = np.random.default_rng(seed)
    coords = np.floor(rng.uniform(0, 12, size=(300, 3)))  # a grid, as the tables are
    return ResidualField(coords, rng.normal(0, 0.3, 300), (1.0, 2.0), robust, carry)


def fresh_search(f: ResidualField, q: np.ndarray) -> tuple[np.ndarray, ...]:
    """The oracle: the same field's search, on a copy that has kept nothing."""
    g = copy.copy(f)
    g.memo_coords, g.memo_out = np.zeros((0, f.coords.shape[1])), np.zeros((0, 3))
    corr, near, inside = g._search(np.ascontiguousarray(q, dtype=float), fit._state(g))
    return corr, near, inside.astype(bool)


def same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    robust=st.booleans(),
    carry=st.sampled_from([(), (2,)]),
    picks=st.lists(st.integers(0, 39), min_size=1, max_size=60),
)
def test_kept_answers_are_the_search_bit_for_bit(seed, robust, carry, picks):
    f = field_of(seed, robust, carry)
    pool = np.random.default_rng(seed + 1).uniform(-3, 15, size=(40, 3))  # some outside
    pool[::5] = f.coords[:8]  # some on measured rows
    first = pool[picks[: len(picks) // 2 + 1]]
    second = pool[picks]  # repeats the first query's rows, in another order, with new ones
    assert same(f.query(first), fresh_search(f, first))
    assert same(f.query(second), fresh_search(f, second))
    assert same(f.query(second), fresh_search(f, second))  # every row kept now


def test_a_stored_field_answers_without_a_tree():
    f = field_of(3, False, ())
    q = np.random.default_rng(4).uniform(0, 12, size=(50, 3))
    want = f.query(q)
    assert f.fold_memo() and not f.fold_memo()  # folded once; nothing new after
    back = _unpack(_pack(f))
    assert back.memo_out.shape == (50, 3)
    assert same(back.query(q), want)
    assert fit._state(back)._tree is None  # answered from the kept rows alone
    more = np.vstack([q[:5], [[1.5, 2.5, 3.5]]])
    assert same(back.query(more), fresh_search(f, more))  # one new row: searched
    assert fit._state(back)._tree is not None


def test_past_the_cap_answers_are_searched_not_kept(monkeypatch):
    monkeypatch.setattr(fit, "MEMO_MAX_ROWS", 10)
    f = field_of(5, True, ())
    q = np.random.default_rng(6).uniform(0, 12, size=(25, 3))
    assert same(f.query(q), fresh_search(f, q))
    assert same(f.query(q[::-1]), fresh_search(f, q[::-1]))
    f.fold_memo()
    assert len(f.memo_coords) == 10 and f.memo_out.shape == (10, 3)


def test_a_stored_memo_of_the_wrong_shape_is_a_miss():
    from moeplan.cost.kerneldb.stored import stored_variant_ok
    from moeplan.kernel_tables import kernel_db

    db = kernel_db()
    op, table = "allreduce", ("h100_sxm", "sglang")
    key = next(iter(db.variants(*table, op)))
    v = _unpack(_pack(db.variant(*table, op, key)))
    assert stored_variant_ok(v, op, key)
    v.field.memo_coords = np.zeros((3, v.field.coords.shape[1] + 1))
    v.field.memo_out = np.zeros((3, 3))
    assert not stored_variant_ok(v, op, key)
    v.field.memo_coords = np.zeros((3, v.field.coords.shape[1]))
    v.field.memo_out = np.zeros((2, 3))
    assert not stored_variant_ok(v, op, key)
    v.field.memo_out = np.full((3, 3), np.nan)
    assert not stored_variant_ok(v, op, key)


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
    """A variant stand-in with empty kept answers (what VariantModel starts with)."""

    def __init__(self) -> None:
        self.memo_spaces, self.memo_keys, self.memo_secs = [], [], []
        self.memo_codes, self.memo_labels = [], []


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
    # the kept answers travel with the variant (a stored file) and answer without pricing
    assert price_memo.fold(vm) and not price_memo.fold(vm)
    assert price_memo.memo_ok(vm)
    back = _unpack(_pack({"v": [vm.memo_spaces, vm.memo_keys, vm.memo_secs, vm.memo_codes,
                                vm.memo_labels]}))["v"]  # fmt: skip
    vm2 = Stub()
    vm2.memo_spaces, vm2.memo_keys, vm2.memo_secs, vm2.memo_codes, vm2.memo_labels = back
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
    price_memo.fold(vm)
    assert sum(len(s) for s in vm.memo_secs) == 7


def test_malformed_kept_prices_are_refused():
    from moeplan.cost.kerneldb.price_memo import memo_ok

    vm = Stub()
    assert memo_ok(vm)
    vm.memo_spaces, vm.memo_labels = ["s"], [["measured", "d"]]
    vm.memo_keys, vm.memo_secs = [np.zeros((2, 3))], [np.ones(2)]
    vm.memo_codes = [np.zeros(2, dtype=np.int64)]
    assert memo_ok(vm)
    for attr, bad in [("memo_codes", [np.array([0, 1])]), ("memo_secs", [np.ones(3)]),
                      ("memo_secs", [np.array([1.0, np.nan])]), ("memo_secs", [-np.ones(2)]),
                      ("memo_keys", [np.zeros((2, 3), dtype=np.float32)]),
                      ("memo_labels", [["measured"]]), ("memo_spaces", ["s", "t"]),
                      ("memo_codes", [np.zeros(2)])]:  # fmt: skip
        keep = getattr(vm, attr)
        setattr(vm, attr, bad)
        assert not memo_ok(vm), attr
        setattr(vm, attr, keep)


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
    for key, vm in list(db._variants.items()):
        if vm is not None and key[2] == "generation_attention":
            from moeplan.cost.kerneldb import price_memo

            price_memo.fold(vm)
            vm.field.fold_memo()
            db._variants[key] = _unpack(_pack(vm))
    third = db.seconds_many("generation_attention", dev, "vllm", cols)
    assert np.array_equal(first, third)
