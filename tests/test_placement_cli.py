"""CLI: moeplan trace synth/stats and moeplan place, human output, bad input -> exit 2.

``place --json`` and its exports (SGLang map, tables, heatmap) are checked in
tests/test_export_place_flags.py, on the same run that checks the SGLang flags for the file.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from moeplan.traces.format import RoutingTrace, load_trace, save_trace
from moeplan.traces.synthetic import SynthConfig, synthesize


def _run(*args):
    p = subprocess.run(
        [sys.executable, "-m", "moeplan", *args], capture_output=True, text=True, timeout=600
    )
    return p.returncode, p.stdout, p.stderr


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "t.parquet"
    rc, out, err = _run(
        "trace",
        "synth",
        "--model",
        "deepseek-v2-lite",
        "--requests",
        "48",
        "--out",
        str(path),
        "--json",
    )
    assert rc == 0, err
    info = json.loads(out)
    assert info["layers"] == 26 and info["experts"] == 64 and info["top_k"] == 6
    return path


def test_trace_stats_and_human_output(trace_path):
    """trace stats --json reports the paper's statistics; place prints a table."""
    rc, out, err = _run("trace", "stats", str(trace_path), "--json")
    assert rc == 0, err
    assert "static_f1" in json.loads(out)
    rc, out, err = _run(
        "place",
        "--trace",
        str(trace_path),
        "--model",
        "deepseek-v2-lite",
        "--ep",
        "8",
        "--no-baselines",
    )
    assert rc == 0, err
    assert "semmoe" in out and "LAR" in out


def _bad(tmp_path, name, trace):
    path = tmp_path / name
    save_trace(trace, path)
    return path


def _one_line_exit_2(*args):
    rc, out, err = _run(*args)
    assert rc == 2, (rc, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_bad_inputs_exit_2_with_one_line(tmp_path, trace_path):
    """Layer mismatch, ids out of range, EP not dividing E, empty and corrupted files."""
    small = synthesize(
        SynthConfig(
            num_layers=4,
            num_experts=64,
            top_k=2,
            num_requests=4,
            min_len=4,
            max_len=8,
            vocab_size=100,
        )
    )
    err = _one_line_exit_2(
        "place",
        "--trace",
        str(_bad(tmp_path, "l.npz", small)),
        "--model",
        "deepseek-v2-lite",
        "--ep",
        "8",
    )
    assert "layers" in err
    full = load_trace(trace_path)
    wide = RoutingTrace(
        request_id=full.request_id,
        position=full.position,
        token_id=full.token_id,
        experts=(full.experts * 2).astype(np.int16),
        num_experts=128,
    )
    err = _one_line_exit_2(
        "place",
        "--trace",
        str(_bad(tmp_path, "w.npz", wide)),
        "--model",
        "deepseek-v2-lite",
        "--ep",
        "8",
    )
    assert "expert" in err
    err = _one_line_exit_2(
        "place", "--trace", str(trace_path), "--model", "deepseek-v2-lite", "--ep", "7"
    )
    assert "divisible" in err
    empty = tmp_path / "empty.npz"
    np.savez(
        empty,
        request_id=np.zeros(0, np.int64),
        position=np.zeros(0, np.int32),
        token_id=np.zeros(0, np.int64),
        layer=np.zeros(0, np.int16),
        experts=np.zeros((0, 6), np.int16),
    )
    _one_line_exit_2("place", "--trace", str(empty), "--model", "deepseek-v2-lite", "--ep", "8")
    corrupt = tmp_path / "c.parquet"
    corrupt.write_bytes(trace_path.read_bytes()[:300])
    err = _one_line_exit_2(
        "place", "--trace", str(corrupt), "--model", "deepseek-v2-lite", "--ep", "8"
    )
    assert "cannot be read" in err
    _one_line_exit_2("trace", "stats", str(corrupt))
