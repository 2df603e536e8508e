"""``moeplan cost``: one shape from flags, a table in and out, one-line errors (exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from cli_run import run_main
from moeplan.kernel_tables import kernel_db

MOE = ["--hidden-size", "4096", "--inter-size", "14336", "--topk", "2", "--num-experts", "8"]


def run(capsys, *args: str) -> tuple[int, str, str]:
    return run_main(capsys, *args)


def test_one_shape_json_matches_the_table(capsys) -> None:
    t = kernel_db().tables[("a100_sxm", "vllm", "moe")]
    i = 0
    args = [
        "--num-tokens",
        str(t.columns["num_tokens"][i]),
        "--hidden-size",
        str(t.columns["hidden_size"][i]),
        "--inter-size",
        str(t.columns["inter_size"][i]),
        "--topk",
        str(t.columns["topk"][i]),
        "--num-experts",
        str(t.columns["num_experts"][i]),
        "--distribution",
        str(t.columns["distribution"][i]),
    ]
    code, out, err = run(
        capsys, "cost", "moe", "--engine", "vllm", "--cluster", "a100-sxm-8", *args, "--json"
    )
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["source"] == "measured"
    assert row["predicted_ms"] == pytest.approx(t.latency[i] * 1e3, rel=1e-6)


def test_human_output_names_source_and_error(capsys) -> None:
    code, out, _ = run(capsys, "cost", "moe", "--num-tokens", "100", *MOE, "--gpu", "h200-sxm")
    assert code == 0
    assert "transferred" in out and "per GPU" in out


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_table_in_parquet_out(capsys, tmp_path, fmt) -> None:
    shapes = pa.table(
        {
            "batch_size": [1, 4, 16],
            "isl": [1024, 3000, 8192],
            "num_heads": [32, 32, 64],
            "num_key_value_heads": [8, 8, 8],
            "head_dim": [128, 128, 128],
            "note": ["a", "b", "c"],
        }
    )
    src = tmp_path / f"shapes.{fmt}"
    (pq.write_table if fmt == "parquet" else pcsv.write_csv)(shapes, src)
    dst = tmp_path / "out.parquet"
    code, out, err = run(
        capsys, "cost", "context_attention", "--table", str(src), "--out", str(dst), "--json"
    )
    assert code == 0, err
    rows = json.loads(out)["rows"]
    got = pq.read_table(dst)
    assert got.column("note").to_pylist() == ["a", "b", "c"]
    assert np.allclose(got.column("predicted_ms").to_numpy(), [r["predicted_ms"] for r in rows])
    assert set(got.column("source").to_pylist()) <= {"measured", "interpolated", "transferred"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([src.name, dst.name])
    # causal prefill grows superlinearly with the prompt at fixed batch
    assert rows[2]["predicted_ms"] > rows[1]["predicted_ms"] > rows[0]["predicted_ms"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["cost", "moe", "--num-tokens", "4", *MOE, "--isl", "3"], "--isl does not apply to moe"),
        (["cost", "nope"], "op ('nope')"),
        (["cost", "moe", "--num-tokens", "0", *MOE], "moe.num_tokens (0) must be"),
        (["cost", "moe", "--num-tokens", "4"], "needs column"),
        (["cost", "moe", "--num-tokens", "4", *MOE, "--engine", "tgi"], "engine ('tgi')"),
        (["cost", "moe", "--num-tokens", "4", *MOE, "--gpu", "tpu"], "gpu ('tpu')"),
        (["cost", "moe", "--num-tokens", "4", *MOE, "--distribution", "zipf"], "distribution"),
        (["cost", "moe", "--table", "/nonexistent/x.parquet"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, args, needle) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1


def test_bad_table_and_out_are_one_line(capsys, tmp_path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    code, _, err = run(capsys, "cost", "moe", "--table", str(bad))
    assert code == 2 and "could not be read" in err and err.count("\n") == 1
    good = tmp_path / "s.csv"
    good.write_text("num_tokens,hidden_size,inter_size,topk,num_experts\n4,4096,14336,2,8\n")
    code, _, err = run(
        capsys, "cost", "moe", "--table", str(good), "--out", str(tmp_path / "o.csv")
    )
    assert code == 2 and "must end in .parquet" in err
    assert not (tmp_path / "o.csv").exists()


def test_calibrate_kernels_reports_regimes_and_writes_errors(capsys, tmp_path) -> None:
    dst = tmp_path / "errors.json"
    code, out, err = run(
        capsys,
        "calibrate",
        "--kernels",
        "--op",
        "deepep_ll_dispatch",
        "--folds",
        "1",
        "--errors-out",
        str(dst),
        "--json",
    )
    assert code == 0, err
    got = json.loads(out)
    cells = {(r["gpu"], r["engine"], r["method"], r["regime"]) for r in got["rows"]}
    assert ("h100_sxm", "sglang", "heldout_shape", "tokens<=64") in cells
    assert ("h100_sxm", "sglang", "roofline", "all") in cells
    written = json.loads(dst.read_text())["errors"]
    assert {"gpu", "engine", "op", "source", "median", "p90"} <= written[0].keys()
    assert all(r["median"] >= 0 for r in written)
    code, _, err = run(capsys, "calibrate", "--folds", "1")
    assert code == 2 and "need --kernels" in err


def test_expert_counts_from_a_trace(capsys, tmp_path) -> None:
    counts = tmp_path / "counts.json"
    counts.write_text(json.dumps([1024] * 128))
    base = [
        "cost",
        "moe",
        "--hidden-size",
        "2048",
        "--inter-size",
        "768",
        "--topk",
        "8",
        "--moe-ep-size",
        "8",
        "--json",
    ]
    code, out, err = run(capsys, *base, "--expert-counts", str(counts))
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["num_experts"] == 128 and row["num_tokens"] == 16384
    assert row["rank_pairs"] == 16384 and row["source"] == "interpolated"
    code, out, _ = run(
        capsys, *base[:-1], "--num-tokens", "16384", "--num-experts", "128", "--json"
    )
    assert json.loads(out)["rows"][0]["predicted_ms"] == pytest.approx(row["predicted_ms"])
    for extra, needle in (
        (["--num-experts", "64"], "disagrees"),
        (["--distribution", "balanced"], "exclude"),
        (["--redundant-experts", "-1"], ">= 0"),
        (["--eplb", "--moe-ep-size", "3"], "divisible"),
    ):
        code, _, err = run(capsys, *base, "--expert-counts", str(counts), *extra)
        assert code == 2 and needle in err and err.count("\n") == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    code, _, err = run(capsys, *base, "--expert-counts", str(bad))
    assert code == 2 and "could not be read" in err
    code, _, err = run(capsys, *base, "--redundant-experts", "4")
    assert code == 2 and "need --expert-counts" in err


def test_new_layer_op_by_col_flags_is_its_measured_row(capsys) -> None:
    """``--col NAME=VALUE`` sets the columns of the newer ops: Qwen3.5-35B-A3B's GDN delta
    rule, 4 sequences of 4096 tokens (SGLang, H100): the table's own row."""
    t = kernel_db().tables[("h100_sxm", "sglang", "context_gdn")]
    c = t.columns
    sel = (
        (c["kernel_source"] == "chunk_gated_delta_rule") & (c["batch_size"] == 4)
        & (c["seq_len"] == 4096) & (c["num_k_heads"] == 16) & (c["num_v_heads"] == 32)
    )  # fmt: skip
    want = float(np.median(t.latency[sel]))
    cols = ["seq_len=4096", "num_k_heads=16", "head_k_dim=128", "num_v_heads=32",
            "head_v_dim=128", "d_conv=4"]  # fmt: skip
    args = ["cost", "context_gdn", "--batch-size", "4", "--kernel-source",
            "chunk_gated_delta_rule", "--json"]  # fmt: skip
    for x in cols:
        args += ["--col", x]
    code, out, _ = run(capsys, *args)
    row = json.loads(out)["rows"][0]
    assert code == 0 and row["source"] == "measured"
    assert row["predicted_ms"] == pytest.approx(want * 1e3)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--col", "seq_len"], "NAME=VALUE"),
        (["--col", "batch_size=4"], "given twice"),
        (["--col", "hidden_size=4096"], "does not apply to context_gdn"),
    ],
)
def test_col_flag_errors_are_one_line(capsys, extra: list[str], needle: str) -> None:
    code, _, err = run(capsys, "cost", "context_gdn", "--batch-size", "4", *extra)
    assert code == 2 and needle in err and err.strip().count("\n") == 0
