"""The kernel-DB disk store's size cap (moeplan.kernel_store, re-exported by kernel_tables).

Oracle: after a write, the files left are the newest by modification time whose sizes fit
under the cap, computed here from the folder's listing, independently of the store's code.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan import kernel_store
from moeplan.errors import MoeplanError
from moeplan.kernel_tables import CACHE_MAX_ENV, DiskStore, cache_max_bytes
from moeplan.units import MIB

TABLE = ("gpu_x", "engine_y", "op_z")
PAST_NS = 1_600_000_000 * 10**9  # 2020: every prepared file is older than a fresh write
_examples = itertools.count()


def _store(root, max_bytes):
    table = root.parent / f"{root.name}-table.parquet"
    table.write_bytes(b"rows")
    return DiskStore(root, {TABLE: table}, {}, max_bytes=max_bytes)


def _key(i):
    return ("variant", *TABLE, i)


def _listing(root):
    """{name: (mtime_ns, size)} of the stored files."""
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in root.glob("*.npz")}


def _newest_that_fit(files, cap):
    """The oracle: walk from the newest file down, stop at the first that does not fit."""
    kept, total = set(), 0
    for name, (_, size) in sorted(files.items(), key=lambda kv: -kv[1][0]):
        if total + size > cap:
            break
        kept.add(name)
        total += size
    return kept


def _prepare(root, sizes, order):
    """Files of the given payload sizes, the i-th of ``order`` the i-th oldest; names by index."""
    store = _store(root, max_bytes=1 << 40)
    for i, size in enumerate(sizes):
        store.put(_key(i), b"x" * size)
    for rank, i in enumerate(order):
        t = PAST_NS + rank * 10**9
        os.utime(store.path(_key(i)), ns=(t, t))
    return {i: store.path(_key(i)).name for i in range(len(sizes))}


def _written_size(tmp_path, key, value):
    """Size of the file a store writes for ``value`` (written once in a folder of its own)."""
    twin = _store(tmp_path / f"twin{next(_examples)}", max_bytes=1 << 40)
    twin.put(key, value)
    return twin.path(key).stat().st_size


@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=7),
    new_size=st.integers(0, 5000),
    cap=st.integers(0, 40000),
    data=st.data(),
)
def test_a_write_keeps_the_newest_files_that_fit(tmp_path, sizes, new_size, cap, data):
    """Any sizes, ages and cap: a write leaves exactly the newest files that fit."""
    root = tmp_path / f"ex{next(_examples)}"
    order = data.draw(st.permutations(range(len(sizes))))
    _prepare(root, sizes, order)
    before = _listing(root)
    store = _store(root, max_bytes=cap)
    value = b"y" * new_size
    before[store.path(_key("new")).name] = (
        PAST_NS + 10**18,  # the newest: written now
        _written_size(tmp_path, _key("new"), value),
    )
    store.put(_key("new"), value)
    left = _listing(root)
    assert set(left) == _newest_that_fit(before, cap)
    assert sum(size for _, size in left.values()) <= cap


def test_a_hit_counts_as_a_use(tmp_path):
    """Of two old files the one read since is kept; without the read, the other one is."""
    kept = {}
    for read in (True, False):
        root = tmp_path / f"read{read}"
        names = _prepare(root, [1000, 1000], order=[0, 1])  # file 0 is the older
        store = _store(root, max_bytes=None)
        if read:
            assert store.get(_key(0)) == b"x" * 1000
        sizes = [size for _, size in _listing(root).values()]
        store.max_bytes = 2 * max(sizes) + 100  # room for the new file and one old one
        store.put(_key("new"), b"y" * 1000)
        kept[read] = set(_listing(root)) - {store.path(_key("new")).name}
    assert kept == {True: {names[0]}, False: {names[1]}}


def test_files_vanishing_meanwhile_are_skipped(tmp_path, monkeypatch):
    """Another process removes one file after the listing took its size and one before its
    size was read: no error, and the rest is trimmed as if those were never there."""
    root = tmp_path / "store"
    names = _prepare(root, [3000, 1000, 2000, 500, 800], order=[0, 1, 2, 3, 4])
    full = _listing(root)
    real_scandir = os.scandir

    class Listing(list):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def racing_scandir(path):
        entries = Listing(real_scandir(path))
        for e in entries:
            if e.name == names[0]:
                e.stat(follow_symlinks=False)  # its size is known, then it goes
        (root / names[0]).unlink()
        (root / names[2]).unlink()  # goes before its size is read
        return entries

    monkeypatch.setattr(kernel_store.os, "scandir", racing_scandir)
    store = _store(root, max_bytes=full[names[3]][1] + full[names[4]][1])
    store.trim()
    monkeypatch.undo()
    survivors = {n: full[n] for n in (names[1], names[3], names[4])}
    assert set(_listing(root)) == _newest_that_fit(survivors, store.max_bytes)
    assert set(_listing(root)) == {names[3], names[4]}


def test_hidden_temp_files_and_other_names_are_not_counted(tmp_path):
    root = tmp_path / "store"
    names = _prepare(root, [100], order=[0])
    (root / f".{names[0]}.abc.tmp").write_bytes(b"z" * 10_000)  # a write in flight
    (root / "notes.txt").write_bytes(b"z" * 10_000)
    store = _store(root, max_bytes=_listing(root)[names[0]][1])
    store.trim()
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [names[0], f".{names[0]}.abc.tmp", "notes.txt"]
    )


def test_cap_from_the_environment(monkeypatch):
    monkeypatch.delenv(CACHE_MAX_ENV, raising=False)
    assert cache_max_bytes() == kernel_store.CACHE_MAX_MB * MIB == 1024 * MIB
    monkeypatch.setenv(CACHE_MAX_ENV, " 256 ")
    assert cache_max_bytes() == 256 * MIB


@pytest.mark.parametrize(
    "value",
    ["", "abc", "0", "-5", "1.5", "1e3", "0x10", "\u0661\u0662", str(2**30 + 1), "9" * 5000],
)
def test_a_bad_cap_is_one_line_naming_it(monkeypatch, value):
    monkeypatch.setenv(CACHE_MAX_ENV, value)
    with pytest.raises(MoeplanError) as err:
        cache_max_bytes()
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{CACHE_MAX_ENV} (") and "whole number of MiB" in msg


def test_cli_rejects_a_bad_cap_with_one_line(tmp_path):
    env = {**os.environ, "MOEPLAN_CACHE_DIR": str(tmp_path), CACHE_MAX_ENV: "lots"}
    cmd = [sys.executable, "-m", "moeplan", "cost", "allreduce", "--message-size", "1048576",
           "--num-gpus", "8"]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"moeplan: error: {CACHE_MAX_ENV} ('lots') must be a whole number of MiB in [1, {2**30}]"
    ]
