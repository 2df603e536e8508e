"""Readers: an int64 sum that would wrap is one line (exit 2), not negative loads; a FIFO
where a file is expected is refused without blocking; a trace whose columns would decode
far beyond its size is refused before anything is decompressed, and members or columns a
trace does not need are never decompressed."""

from __future__ import annotations

import io
import os
import threading
import zipfile

import numpy as np
import pytest
import torch

from moeplan.cli import main
from moeplan.errors import MoeplanError
from moeplan.traces import trace_reader
from moeplan.traces.format import load_trace


def cli(args: list[str]) -> int:
    try:
        main(args)
    except SystemExit as ex:
        return int(ex.code or 0)
    return 0


def test_stat_counts_whose_sum_wraps_int64_are_refused(tmp_path, capsys):
    """Four steps of 2^61 each pass the per-value range check; their int64 sum is 2^63,
    which wraps to -9.2e18 (what the file used to import as)."""
    c = torch.full((4, 2, 8), 2**61, dtype=torch.int64)
    torch.save({"logical_count": c}, tmp_path / "big.pt")
    out = tmp_path / "load.json"
    assert cli(["trace", "import", str(tmp_path / "big.pt"), "--from", "sglang-stat",
                "--out", str(out)]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "summed over steps" in err and "2^62" in err and not out.exists()
    ok = torch.full((3, 2, 8), 2**59, dtype=torch.int64)  # 1.5 * 2^60: exact, accepted
    for r in range(2):
        torch.save({"logical_count": ok}, tmp_path / f"ok{r}.pt")
    from moeplan.traces.sglang import read_stat

    assert (read_stat([tmp_path / "ok0.pt", tmp_path / "ok1.pt"]) == 6 * 2**59).all()
    torch.save({"logical_count": torch.full((1, 2, 8), 3 * 2**60)}, tmp_path / "edge.pt")
    with pytest.raises(MoeplanError, match="summed over files"):
        read_stat([tmp_path / "edge.pt", tmp_path / "edge.pt"])


def no_block(fn) -> BaseException | None:
    """Run ``fn`` in a thread; fail if it is still running after 20 s; its exception."""
    got: list[BaseException | None] = []

    def body():
        try:
            fn()
            got.append(None)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            got.append(err)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "blocked on a FIFO"
    return got[0]


@pytest.mark.parametrize("name", ["dump.pt", "trace.npz", "trace.parquet", "config.json"])
def test_a_fifo_is_refused_without_blocking(tmp_path, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    if name.endswith(".pt"):
        from moeplan.traces.sglang import read_stat

        err = no_block(lambda: read_stat([fifo]))
    elif name.endswith(".json"):
        from moeplan.specs import load_model

        err = no_block(lambda: load_model(str(fifo)))
    else:
        err = no_block(lambda: load_trace(fifo))
    assert isinstance(err, MoeplanError) and "regular file" in str(err) and str(fifo) in str(err)


def deflated_zeros_member(z: zipfile.ZipFile, name: str, shape: tuple, dtype: str) -> None:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape}
    )
    left = int(np.prod(shape)) * np.dtype(dtype).itemsize
    with z.open(name, "w", force_zip64=True) as f:
        f.write(header.getvalue())
        chunk = bytes(1 << 22)
        while left > 0:
            f.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)


def small_trace_members(z: zipfile.ZipFile) -> None:
    n = 4
    cols = {"request_id": np.zeros(n, np.int64), "position": np.arange(n, dtype=np.int32),
            "token_id": np.ones(n, np.int64), "layer": np.zeros(n, np.int16),
            "experts": np.zeros((n, 2), np.int16), "num_experts": np.int64(8)}  # fmt: skip
    for k, a in cols.items():
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.asarray(a), allow_pickle=False)
        z.writestr(k + ".npy", buf.getvalue())


def test_an_npz_bomb_is_refused_before_decompression(tmp_path, monkeypatch):
    """30 MB of zeros deflated into ~30 KB (1000x; the floor lowered to 16 MiB to keep the
    test small): its declared size is over the limit, refused without reading the data."""
    monkeypatch.setattr(trace_reader, "DECODED_FLOOR", 16 << 20)
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        deflated_zeros_member(z, "experts.npy", (7_500_000, 2), "<i2")
    assert os.path.getsize(path) < 100_000
    monkeypatch.setattr(np.lib.format, "read_array", lambda *a, **k: pytest.fail("read"))
    with pytest.raises(MoeplanError, match=r"declares 30000000 bytes of columns; more than"):
        load_trace(path)


def test_members_a_trace_does_not_need_are_never_decompressed(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_reader, "DECODED_FLOOR", 16 << 20)
    path = tmp_path / "extra.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        small_trace_members(z)
        deflated_zeros_member(z, "junk.npy", (7_500_000, 2), "<i2")
    tr = load_trace(path)
    assert tr.num_tokens == 4 and tr.num_experts == 8


def test_parquet_columns_are_bounded_by_rows_times_width(tmp_path, monkeypatch):
    """A run-length-encoded constant column: tiny on disk, rows x width decoded; with the
    limits lowered, the file is refused before a row group is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 200_000
    t = pa.table({"request_id": np.zeros(n, np.int64), "position": np.zeros(n, np.int32),
                  "token_id": np.zeros(n, np.int64), "layer": np.zeros(n, np.int16),
                  "experts": pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(2 * n, np.int16)), 2),
                  "junk": pa.array(["x" * 1000] * 10 + [None] * (n - 10))})  # fmt: skip
    path = tmp_path / "t.parquet"
    pq.write_table(t, path)
    pf = pq.ParquetFile(path)
    names = [c for c in pf.schema_arrow.names if c in trace_reader.NEEDED]
    assert "junk" not in names
    assert trace_reader._parquet_decoded(pf, names) == n * (8 + 4 + 8 + 2 + 2 * 2)
    monkeypatch.setattr(trace_reader, "DECODED_FLOOR", 1 << 20)
    monkeypatch.setattr(trace_reader, "MAX_EXPANSION", 2)
    read = []
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", lambda *a, **k: read.append(a))
    with pytest.raises(MoeplanError, match=r"declares 5200000 bytes of columns"):
        load_trace(path)
    assert read == []


def test_expert_counts_fifo_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "counts.json"
    os.mkfifo(fifo)
    args = ["cost", "moe", "--num-tokens", "64", "--hidden-size", "2048", "--inter-size", "768",
            "--topk", "8", "--num-experts", "8", "--expert-counts", str(fifo)]  # fmt: skip
    codes: list[int] = []
    err = no_block(lambda: codes.append(cli(args)))
    assert err is None and codes == [2] and "regular file" in capsys.readouterr().err
