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
