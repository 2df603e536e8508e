"""The kernel-variant cache never runs code and never blocks: a planted pickle, a symlink, a
FIFO, a folder others may write, a foreign or malformed ``.npz`` are all misses (rebuilt);
the codec decodes only what it wrote (random graphs: a value or :class:`CodecError`)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import pickle
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moeplan import kernel_codec
from moeplan.kernel_codec import CodecError, decode, encode
from moeplan.kernel_store import DiskStore, _pack, _unpack

TABLE = ("gpu_x", "engine_y", "op_z")
KEY = ("variants", *TABLE)


class Evil:
    """Unpickling it opens (creates) ``marker``: code from the file would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def store_at(tmp_path: Path) -> DiskStore:
    table = tmp_path / "table.parquet"
    table.write_bytes(b"rows")
    return DiskStore(tmp_path / "store", {TABLE: table}, {}, max_bytes=1 << 30)


def test_a_planted_pickle_is_a_miss_and_runs_nothing(tmp_path):
    store = store_at(tmp_path)
    store.put(KEY, {("a",): 1})
    marker = tmp_path / "PWNED"
    path = store.path(KEY)
    path.write_bytes(pickle.dumps(Evil(marker)))
    os.chmod(path, 0o600)
    assert store.get(KEY) is None and not marker.exists()
    store.put(KEY, {("a",): 2})  # rebuilt and rewritten
    assert store.get(KEY) == {("a",): 2}


def test_symlinks_fifos_and_open_folders_are_misses_that_never_block(tmp_path):
    store = store_at(tmp_path)
    store.put(KEY, {("a",): 1})
    path = store.path(KEY)
    real = tmp_path / "elsewhere.npz"
    path.rename(real)
    path.symlink_to(real)  # a symlink to a file that would pass every check
    assert store.get(KEY) is None
    path.unlink()
    os.mkfifo(path, 0o600)
    got = []
    reader = threading.Thread(target=lambda: got.append(store.get(KEY)), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive() and got == [None]
    path.unlink()
    real.rename(path)
    assert store.get(KEY) == {("a",): 1}
    os.chmod(store.root, 0o777)  # a folder anyone may write: nothing in it is trusted
    try:
        assert store.get(KEY) is None
    finally:
        os.chmod(store.root, 0o700)
    os.chmod(path, 0o666)
    assert store.get(KEY) is None


def npz(members: dict[str, np.ndarray], compression: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, a in members.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, a, allow_pickle=True)
            z.writestr(name + ".npy", member.getvalue())
    return buf.getvalue()


def graph(obj) -> np.ndarray:
    return np.frombuffer(json.dumps(obj).encode(), np.uint8)


@pytest.mark.parametrize(
    "blob",
    [
        npz({"graph": graph({"o": ["Popen", {}]})}),  # a class it does not store
        npz({"graph": graph({"o": ["Analytic", {"floor": 1.0}]})}),  # not its slots
        npz({"graph": graph({"a": 0}), "a0": np.array([Evil(Path("/x"))], dtype=object)}),
        npz({"graph": graph({"A": ["O", [1], [1]]})}),  # object dtype inline
        npz({"graph": graph({"l": [1]})}, zipfile.ZIP_DEFLATED),  # compressed: refused
        npz({"graph": np.array(["{}"])}),  # graph not bytes
        b"PK\x03\x04 truncated",
        pickle.dumps({("a",): 1}),
    ],
)
def test_foreign_npz_files_do_not_decode(blob):
    with pytest.raises((CodecError, ValueError, zipfile.BadZipFile)):
        _unpack(blob)


def test_real_variant_round_trips(tmp_path):
    from moeplan.kernel_tables import kernel_db

    db = kernel_db()
    (key,) = list(db.variants("h100_sxm", "sglang", "allreduce"))[:1]
    v = db.variant("h100_sxm", "sglang", "allreduce", key)
    back = _unpack(_pack(v))
    assert type(back) is type(v) and back.label == v.label and back.exact == v.exact
    cols = {c: np.asarray(a)[:5] for c, a in v.cols.items()}
    assert np.array_equal(
        back.model.predict(back.featurize(cols), back.device, back.family.link),
        v.model.predict(v.featurize(cols), v.device, v.family.link),
    )
    q = v.features.coords[:7]
    assert all(
        np.array_equal(a, b) for a, b in zip(back.field.query(q), v.field.query(q), strict=True)
    )


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
nodes = st.recursive(
    scalars,
    lambda kids: (
        st.lists(kids, max_size=4)
        | st.dictionaries(
            st.sampled_from(list("ltdaAnbfkocr") + ["x"]), kids, min_size=1, max_size=1
        )
    ),
    max_leaves=25,
)


@given(tree=nodes)
def test_random_graphs_decode_or_raise_codec_error(tree):
    arrays = [np.arange(5.0), np.array(["x", "y"]), np.arange(3)]
    with contextlib.suppress(CodecError):  # a value, or this error: nothing else
        decode(json.dumps(tree).encode(), arrays)


@given(
    value=st.recursive(
        scalars | st.binary(max_size=8),
        lambda kids: (
            st.lists(kids, max_size=3)
            | st.tuples(kids, kids)
            | st.dictionaries(st.integers() | st.text(max_size=3), kids, max_size=3)
        ),
        max_leaves=15,
    )
)
def test_plain_values_round_trip(value):
    g, arrays = encode(value)
    back = decode(g, arrays)
    assert json.dumps(back, default=repr, allow_nan=True) == json.dumps(value, default=repr)


def test_cli_never_runs_a_planted_cache_file(tmp_path):
    env = {**os.environ, "MOEPLAN_CACHE_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "moeplan", "cost", "allreduce", "--message-size", "1048576",
           "--num-gpus", "8"]  # fmt: skip
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    marker = tmp_path / "PWNED"
    planted = [p for p in (tmp_path / "kerneldb").iterdir() if not p.name.startswith(".")]
    assert planted
    for p in planted:
        p.write_bytes(pickle.dumps(Evil(marker)))
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout == first.stdout and not marker.exists()


def test_codec_classes_are_what_variants_are_built_of():
    assert set(kernel_codec.CLASSES) == {
        "VariantModel",
        "ResidualField",
        "Analytic",
        "Features",
        "WaveFeatures",
        "Device",
    }


def _tamper(kind: str, variant: Path, counts: Path) -> None:
    """Rewrite ``variant`` as a well-packed file holding the wrong thing."""
    real = _unpack(variant.read_bytes())
    if kind == "int":
        blob = _pack(7)
    elif kind == "empty list":
        blob = _pack([])
    elif kind == "another variant's file":
        blob = counts.read_bytes()
    elif kind == "missing attribute":
        del vars(real)["field"]
        blob = _pack(real)
    elif kind == "wrong attribute type":
        vars(real)["model"] = 3.5
        blob = _pack(real)
    else:  # NaN numbers
        real.y = real.y * np.nan
        real.exact = dict.fromkeys(real.exact, float("nan"))
        blob = _pack(real)
    variant.write_bytes(blob)
    os.chmod(variant, 0o600)


def test_cli_rebuilds_cache_entries_of_the_wrong_shape(tmp_path):
    """A variant file that decodes to an int, an empty list, another variant's value, a
    variant missing an attribute or holding NaN is a miss: rebuilt, same answer, valid JSON."""
    env = {**os.environ, "MOEPLAN_CACHE_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "moeplan", "cost", "allreduce", "--message-size", "1048576",
           "--num-gpus", "8", "--json"]  # fmt: skip
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    root = tmp_path / "kerneldb"
    (variant,) = root.glob("*-variant-*.npz")
    (counts,) = root.glob("*-variants-*.npz")
    good = variant.read_bytes()
    kinds = ["int", "empty list", "another variant's file", "missing attribute",
             "wrong attribute type", "NaN"]  # fmt: skip
    for kind in kinds:
        variant.write_bytes(good)
        _tamper(kind, variant, counts)
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, (kind, again.stderr)
        assert again.stdout == first.stdout, kind
        json.loads(again.stdout, parse_constant=lambda c, k=kind: pytest.fail(f"{k}: bare {c}"))


def test_store_values_of_the_wrong_shape_are_misses():
    from moeplan.cost.kerneldb.stored import stored_counts_ok, stored_variant_ok
    from moeplan.kernel_tables import kernel_db

    db = kernel_db()
    op, table = "allreduce", ("h100_sxm", "sglang")
    counts = db.variants(*table, op)
    key = next(iter(counts))
    real = db.variant(*table, op, key)
    assert stored_counts_ok(counts, op) and stored_variant_ok(real, op, key)
    for bad in (7, [], {}, counts, None, "x"):
        assert not stored_variant_ok(bad, op, key)
    for bad in (7, [], {("a", "b", "c", "d", "e", "f", "g"): 1}, {key: -1}, {key: True}):
        assert not stored_counts_ok(bad, op)
    assert not stored_variant_ok(real, op, ("another", *key))
    assert not stored_variant_ok(real, "moe", key)


def _finite_oracle(value, depth=0):
    """Every float in ``value`` finite, item by item (what ``stored._finite`` answers)."""
    from moeplan.cost.kerneldb.stored import SCHEMA, _attrs

    if depth > 16:
        return False
    if isinstance(value, (float, np.floating)):
        return math.isfinite(value)
    if isinstance(value, np.ndarray):
        return value.dtype.kind != "f" or bool(np.isfinite(value).all())
    if isinstance(value, (list, tuple)):
        return all(_finite_oracle(x, depth + 1) for x in value)
    if isinstance(value, dict):
        return all(_finite_oracle(k, depth + 1) and _finite_oracle(x, depth + 1)
                   for k, x in value.items())  # fmt: skip
    if type(value) in SCHEMA:
        attrs = _attrs(value)
        return attrs is not None and all(_finite_oracle(x, depth + 1) for x in attrs.values())
    return True


def test_finite_check_finds_every_non_finite_float():
    """The store's finiteness check (floats checked as arrays, row tuples column by column)
    answers as an item-by-item walk does: a NaN or infinity anywhere — a row key of a
    variant's exact-row dict, a nested list, a NumPy scalar, a value — is found, and a
    nesting deeper than the walk allows is refused."""
    from moeplan.cost.kerneldb.stored import _finite
    from moeplan.kernel_tables import kernel_db

    nan, inf = float("nan"), float("inf")
    deep: object = 1.0
    for _ in range(20):
        deep = [deep]
    rows = {(float(i), "bf16", 2.0 * i): 1e-5 * (i + 1) for i in range(50)}
    cases = [
        rows,
        {**rows, (1.5, "bf16", nan): 1e-5},
        {**rows, (1.5, "bf16", 3.0): inf},
        {(1.0, "a"): 1.0, (2.0,): 2.0},
        {(1.0, ("x", -inf)): 1.0},
        [1.0, "x", 3, True, None, (2.0, [np.float64(nan)])],
        [1.0, "x", 3, True, None, (2.0, [np.float64(4.0)])],
        [(), (), ()],
        [(np.zeros(3), np.ones(2)), (np.zeros(3), np.array([1.0, nan]))],
        (np.arange(3), np.array([0.5, 1.5])),
        deep,
        [[[]]],
        {"a": {"b": (1.0, [2.0, {"c": -inf}])}},
    ]
    for value in cases:
        assert _finite(value) == _finite_oracle(value), value
    assert not _finite(cases[1]) and not _finite(cases[2]) and not _finite(deep)
    db = kernel_db()
    op, table = "allreduce", ("h100_sxm", "sglang")
    real = db.variant(*table, op, next(iter(db.variants(*table, op))))
    assert _finite(real) and _finite_oracle(real)
    bad = copy.copy(real)  # the database's own variant stays as built
    bad.exact = {**real.exact, next(iter(real.exact))[:-1] + (nan,): 1e-5}
    assert not _finite(bad) and not _finite_oracle(bad)


def test_json_output_is_always_valid_json(capsys):
    from moeplan.cli._common import print_json

    print_json({"a": float("nan"), "b": [np.float64("inf"), 1.5], "c": np.array([-np.inf, 2.0])})
    out = capsys.readouterr().out
    got = json.loads(out, parse_constant=lambda c: pytest.fail(f"bare {c} in --json output"))
    assert got == {"a": None, "b": [None, 1.5], "c": [None, 2.0]}


def test_tests_never_use_the_users_kernel_cache():
    """The test suite's kernel cache is its own (tests/conftest.py), never ~/.cache/moeplan."""
    from moeplan.kernel_store import cache_dir

    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "moeplan"
    ours = cache_dir()
    assert ours is None or not ours.resolve().is_relative_to(user.resolve()), ours
