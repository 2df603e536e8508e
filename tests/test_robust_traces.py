"""Trace readers: no silent int16 wrap, bounded claims, one line per bad file.

Regression cases 2, 7 and 8 from their reproductions; files written 0644 and atomically; the
sparse look-back table equals the dense one it replaced (brute-force oracle); a hypothesis
fuzz over npz columns (any accepted file round-trips its ids exactly).
"""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.errors import MoeplanError
from moeplan.traces import sglang
from moeplan.traces.format import load_trace, save_trace, to_long
from moeplan.traces.stats import lookback_accuracy, majority_device, trace_stats
from moeplan.traces.synthetic import SynthConfig, synthesize, uniform_trace

E, L, K = 64, 3, 2
BASE = uniform_trace(num_requests=6, length=4, num_layers=L, num_experts=E, top_k=K)


def _cols() -> dict[str, np.ndarray]:
    cols = {k: np.array(v) for k, v in to_long(BASE).items()}
    cols["num_experts"] = np.int64(E)
    return cols


def _put(a: np.ndarray, index, value) -> np.ndarray:
    b = a.astype(np.int64)
    b[index] = value
    return b


def _npz(tmp_path, cols, name="t.npz"):
    path = tmp_path / name
    np.savez(path, **cols)
    return path


def _one_line(fn, *needles):
    with pytest.raises(MoeplanError) as info:
        fn()
    msg = str(info.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg
    return msg


@pytest.mark.parametrize("bad", [65541, 65535, 64, -2])
def test_case2_expert_ids_are_range_checked_before_the_int16_cast(tmp_path, bad):
    cols = _cols()
    cols["experts"] = _put(cols["experts"], (0, 0), bad)
    path = _npz(tmp_path, cols)
    _one_line(lambda: load_trace(path, num_experts=E), "trace.experts", str(bad))
    _one_line(lambda: load_trace(path), "trace.experts", str(bad))


@pytest.mark.parametrize(
    "make",
    [
        lambda e: e + 0.5,
        lambda e: np.full(e.shape, np.nan),
        lambda e: np.full(e.shape, np.inf),
        lambda e: e > 3,
    ],
    ids=["float", "nan", "inf", "bool"],
)
def test_case2_non_integer_expert_columns_are_refused(tmp_path, make):
    cols = _cols()
    cols["experts"] = make(cols["experts"])
    _one_line(lambda: load_trace(_npz(tmp_path, cols)), "integer array")


@pytest.mark.parametrize(
    ("column", "make", "needle"),
    [
        ("request_id", lambda a: a.astype(str), "trace.request_id"),
        ("layer", lambda a: a.astype(str), "trace.layer"),
        ("experts", lambda a: a[:, :0], "k=0"),
        ("weights", lambda a: np.ones((3, 2), np.float32), "trace.weights"),
        ("request_id", lambda a: np.int64(3), "trace.request_id"),
        ("token_id", lambda a: _put(a, 0, 2**62), "trace.token_id"),
        ("position", lambda a: a[:5], "trace.position"),
        ("layer", lambda a: _put(a, -1, 10**12), "trace.layer"),
        ("num_experts", lambda a: np.int64(10**12), "num_experts"),
        ("num_experts", lambda a: np.float64(64.0), "num_experts"),
    ],
)
def test_case8_bad_npz_columns_are_one_line(tmp_path, column, make, needle):
    cols = _cols()
    cols[column] = make(cols.get(column, cols["experts"]))
    _one_line(lambda: load_trace(_npz(tmp_path, cols)), needle)


def test_case6_npy_header_claiming_terabytes_is_refused_before_allocating(tmp_path):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<i8", "fortran_order": False, "shape": (10**12,)}
    )
    path = tmp_path / "lie.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("experts.npy", buf.getvalue() + b"\0" * 64)
    _one_line(lambda: load_trace(path), "claims shape", "holds")


def test_trace_files_are_0644_and_leave_no_temp(tmp_path):
    old = os.umask(0o022)
    try:
        for suffix in (".npz", ".parquet"):
            path = tmp_path / f"t{suffix}"
            save_trace(BASE, path)
            assert os.stat(path).st_mode & 0o777 == 0o644
            back = load_trace(path)
            assert np.array_equal(back.experts, BASE.experts)
    finally:
        os.umask(old)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_trace_stats_ep_zero_or_negative_is_one_line():
    for ep in (0, -1, E + 1):
        _one_line(lambda ep=ep: trace_stats(BASE, ep=ep), "--ep")


def test_sparse_lookback_equals_the_dense_table():
    """Oracle: the original dense (ep^n x ep) table, argmax with lowest-device ties."""

    def dense(train, test, ep, n_max):
        dev_of = np.arange(train.num_experts) // (train.num_experts // ep)
        d_tr = majority_device(train.experts.astype(np.int64), dev_of, ep)
        d_te = majority_device(test.experts.astype(np.int64), dev_of, ep)
        out = []
        for n in range(1, n_max + 1):
            hits = total = 0
            for layer in range(n, train.num_layers):
                kt = np.zeros(len(d_tr), np.int64)
                ke = np.zeros(len(d_te), np.int64)
                for back in range(1, n + 1):
                    kt = kt * ep + d_tr[:, layer - back]
                    ke = ke * ep + d_te[:, layer - back]
                table = np.zeros((ep**n, ep), np.int64)
                np.add.at(table, (kt, d_tr[:, layer]), 1)
                hits += int((table.argmax(1)[ke] == d_te[:, layer]).sum())
                total += len(d_te)
            out.append(hits / max(total, 1))
        return out

    from moeplan.traces.format import split

    for seed in range(2):
        tr = synthesize(
            SynthConfig(
                num_layers=6,
                num_experts=16,
                top_k=2,
                num_requests=40,
                min_len=4,
                max_len=12,
                num_groups=4,
                num_topics=4,
                seed=seed,
            )
        )
        a, b = split(tr, seed, 0.3)
        for ep in (1, 2, 4, 8):
            assert lookback_accuracy(a, b, ep) == dense(a, b, ep, 5)


# ---------------------------------------------------------------- SGLang dumps (case 7)
_REC = {
    "input_ids": [1, 2, 3],
    "positions": [0, 1, 2],
    "extend_seq_lens": [3],
    "topk_ids_of_layer": torch.tensor([[[0, 1], [2, 3], [4, 5]]] * 2),
}


@pytest.mark.parametrize(
    ("dump", "needle"),
    [
        (
            {
                "records": [_REC],
                "last_physical_to_logical_map": torch.zeros((2, 3), dtype=torch.int64),
            },
            "physical",
        ),
        ({"records": 5}, "must be a list"),
        ({"records": [{**_REC, "input_ids": ["a", "b", "c"]}]}, "input_ids"),
        (
            {
                "records": [
                    _REC,
                    {**_REC, "topk_ids_of_layer": torch.zeros((2, 3, 3), dtype=torch.int64)},
                ]
            },
            "first record",
        ),
        ({"records": [{**_REC, "topk_ids_of_layer": torch.full((2, 3, 2), 70000)}]}, "70000"),
        ({"records": [{**_REC, "topk_ids_of_layer": torch.rand(2, 3, 2)}]}, "integer"),
        ({"records": [1]}, "must be a dict"),
        ([1, 2], "no records"),
    ],
)
def test_case7_per_token_dumps_are_one_line(tmp_path, dump, needle):
    path = tmp_path / "expert_distribution_recorder_0.pt"
    torch.save(dump, path)
    _one_line(lambda: sglang.read_per_token([path]), needle)


def test_case2_import_never_stores_a_wrapped_id(tmp_path):
    path = tmp_path / "d.pt"
    torch.save({"records": [{**_REC, "topk_ids_of_layer": torch.full((2, 3, 2), 70000)}]}, path)
    _one_line(lambda: sglang.read_per_token([path], num_experts=64), "70000", "-1..63")
    ok = tmp_path / "ok.pt"
    torch.save({"records": [_REC]}, ok)
    tr = sglang.read_per_token([ok], num_experts=8)
    assert tr.experts.tolist() == [[[0, 1]] * 2, [[2, 3]] * 2, [[4, 5]] * 2]


@pytest.mark.parametrize(
    ("counts", "needle"),
    [
        (torch.full((2, 3, 8), float("nan")), "finite"),
        (torch.ones(8), "2/3-d"),
        ("x", "2/3-d"),
        (-torch.ones((3, 8), dtype=torch.int64), "range"),
    ],
)
def test_case7_stat_dumps_are_one_line(tmp_path, counts, needle):
    path = tmp_path / "s.pt"
    torch.save({"logical_count": counts}, path)
    _one_line(lambda: sglang.read_stat([path]), needle)


def test_case7_stat_files_with_different_expert_counts(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"logical_count": torch.ones((2, 3, 8), dtype=torch.int64)}, a)
    torch.save({"logical_count": torch.ones((2, 3, 16), dtype=torch.int64)}, b)
    _one_line(lambda: sglang.read_stat([a, b]), "first file")
    assert sglang.read_stat([a, a]).tolist() == [[4] * 8] * 3  # 2 steps x 2 files


# ---------------------------------------------------------------- fuzz
_MUTATIONS = ("dtype", "value", "length", "drop", "ndim")


@settings(derandomize=True, deadline=None, max_examples=examples(200))
@given(
    column=st.sampled_from(
        ["request_id", "position", "token_id", "layer", "experts", "weights", "num_experts"]
    ),
    how=st.sampled_from(_MUTATIONS),
    value=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    dtype=st.sampled_from(["f8", "f4", "?", "U3", "u8", "i1", "i2", "i4"]),
    data=st.data(),
)
def test_fuzz_npz_columns_load_exactly_or_one_line(
    tmp_path_factory, column, how, value, dtype, data
):
    cols = _cols()
    cols["weights"] = np.ones(cols["experts"].shape, np.float32)
    a = np.asarray(cols[column])
    if how == "dtype":
        with np.errstate(all="ignore"):
            cols[column] = a.astype(dtype)
    elif how == "value":
        b = a.astype(np.int64) if a.dtype.kind in "iu" else a.copy()
        idx = data.draw(st.integers(0, max(b.size - 1, 0)))
        b.reshape(-1)[idx] = value if b.dtype.kind == "i" else float(value)
        cols[column] = b
    elif how == "length":
        cols[column] = (
            a[: data.draw(st.integers(0, max(len(a.reshape(-1)) - 1, 0)))] if a.ndim else a
        )
    elif how == "drop":
        del cols[column]
    else:
        cols[column] = a.reshape(-1) if a.ndim > 1 else a[None]
    path = tmp_path_factory.mktemp("tr") / "t.npz"
    np.savez(path, **cols)
    try:
        tr = load_trace(path, num_experts=data.draw(st.sampled_from([None, E])))
    except MoeplanError as err:
        assert "\n" not in str(err)
        return
    raw = np.asarray(cols["experts"]).astype(np.int64)  # what the file holds, unwrapped
    assert np.array_equal(tr.experts.reshape(-1, raw.shape[1]).astype(np.int64), raw)
    assert tr.experts.min() >= -1 and tr.experts.max() < tr.num_experts
