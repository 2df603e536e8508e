"""Trace format: round trips, streaming by whole requests, seeded split, bad files."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeplan.errors import MoeplanError
from moeplan.traces.format import (
    RoutingTrace,
    TraceWriter,
    concat,
    iter_trace,
    load_trace,
    save_trace,
    split,
)


def _trace(seed, requests=5, layers=3, k=2, e=8, with_weights=False):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 7, size=requests)
    n = int(lengths.sum())
    experts = rng.integers(-1, e, size=(n, layers, k)).astype(np.int16)
    return RoutingTrace(
        request_id=np.repeat(np.arange(requests) * 3 + 1, lengths),
        position=np.concatenate([np.arange(x) for x in lengths]).astype(np.int32),
        token_id=rng.integers(0, 50, size=n),
        experts=experts,
        num_experts=e,
        weights=rng.random((n, layers, k)).astype(np.float32) if with_weights else None,
    )


def _equal(a, b):
    assert np.array_equal(a.request_id, b.request_id)
    assert np.array_equal(a.position, b.position)
    assert np.array_equal(a.token_id, b.token_id)
    assert np.array_equal(a.experts, b.experts)
    assert a.num_experts == b.num_experts
    assert (a.weights is None) == (b.weights is None)
    if a.weights is not None:
        assert np.allclose(a.weights, b.weights)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), suffix=st.sampled_from([".npz", ".parquet"]), w=st.booleans())
def test_round_trip_is_lossless(tmp_path_factory, seed, suffix, w):
    """save_trace then load_trace returns the same arrays (npz and Parquet)."""
    tr = _trace(seed, with_weights=w)
    path = tmp_path_factory.mktemp("t") / f"x{suffix}"
    save_trace(tr, path)
    _equal(tr, load_trace(path))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), chunk=st.integers(1, 9), rg=st.integers(1, 7))
def test_streaming_yields_whole_requests(tmp_path_factory, seed, chunk, rg):
    """Chunks never split a request, and their concatenation is the trace."""
    tr = _trace(seed, requests=8)
    path = tmp_path_factory.mktemp("s") / "x.parquet"
    save_trace(tr, path, row_group_occurrences=rg)
    chunks = list(iter_trace(path, chunk_occurrences=chunk))
    _equal(tr, concat(chunks))
    seen = set()
    for c in chunks:
        ids = set(np.unique(c.request_id).tolist())
        assert not ids & seen
        seen |= ids


def test_streaming_writer_equals_one_shot(tmp_path):
    """TraceWriter (chunked) writes the same trace as save_trace."""
    a, b = _trace(1), _trace(2)
    b = RoutingTrace(
        request_id=b.request_id + 1000,
        position=b.position,
        token_id=b.token_id,
        experts=b.experts,
        num_experts=8,
    )
    w = TraceWriter(tmp_path / "w.parquet")
    w.write(a)
    w.write(b)
    w.close()
    _equal(concat([a, b]), load_trace(tmp_path / "w.parquet"))


def test_split_is_by_request_and_seeded():
    """Train and test share no request; the same seed gives the same split."""
    tr = _trace(3, requests=200)
    train, test = split(tr, seed=5, test_fraction=0.3)
    assert not set(train.request_id) & set(test.request_id)
    assert train.num_tokens + test.num_tokens == tr.num_tokens
    train2, _ = split(tr, seed=5, test_fraction=0.3)
    assert np.array_equal(train.request_id, train2.request_id)
    frac = len(np.unique(test.request_id)) / 200
    assert 0.15 < frac < 0.45


def test_corrupted_and_empty_files_raise_one_line(tmp_path):
    """A damaged file and an empty trace raise MoeplanError naming the file."""
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(MoeplanError, match="cannot be read"):
        load_trace(bad)
    bad_npz = tmp_path / "bad.npz"
    bad_npz.write_bytes(b"\x00" * 20)
    with pytest.raises(MoeplanError, match="cannot be read"):
        load_trace(bad_npz)
    with pytest.raises(MoeplanError):
        concat([])


def test_expert_ids_out_of_range_are_rejected():
    """Expert ids >= num_experts are a one-line user error."""
    tr = _trace(0)
    with pytest.raises(MoeplanError, match="trace.experts"):
        RoutingTrace(
            request_id=tr.request_id,
            position=tr.position,
            token_id=tr.token_id,
            experts=tr.experts,
            num_experts=4,
        )
