"""The frozen test fold of the kernel tables (cost/kerneldb/frozen_fold.py,
src/moeplan/data/test_fold.json): the manifest states the code's rule, matches every frozen
table the package ships, and no development path reads a test-fold row."""

from __future__ import annotations

import ast
import json
import shutil
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from moeplan.cost.kerneldb import frozen_fold
from moeplan.kernel_tables import frozen_fold_loaders, frozen_test_rows, kernels_dir, table_loaders

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from freeze_test_fold import check, frozen_paths  # noqa: E402

MANIFEST = json.loads(
    resources.files("moeplan").joinpath("data", "test_fold.json").read_text(encoding="utf-8")
)
#: a shipped development table, copied under a frozen and an unfrozen place in a scratch root
SAMPLE = "h100_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet"


def test_manifest_states_the_rule_of_the_code():
    assert MANIFEST["rule"] == frozen_fold.RULE
    assert (MANIFEST["modulus"], MANIFEST["residue"]) == (frozen_fold.MODULUS, frozen_fold.RESIDUE)
    assert MANIFEST["frozen_gpus"] == list(frozen_fold.FROZEN_GPUS)
    assert [tuple(v) for v in MANIFEST["frozen_versions"]] == list(frozen_fold.FROZEN_VERSIONS)
    assert MANIFEST["developed"] == list(frozen_fold.DEVELOPED)
    assert MANIFEST["token_axes"] == sorted(frozen_fold.TOKEN_AXES)
    assert all(frozen_fold.frozen_table(t["path"]) for t in MANIFEST["tables"])
    for k in ("rows", "shapes", "test_rows", "test_shapes"):
        assert MANIFEST["totals"][k] == sum(t[k] for t in MANIFEST["tables"])
    # the fold is about one shape in five of the frozen tables
    assert 0.15 < MANIFEST["totals"]["test_shapes"] / MANIFEST["totals"]["shapes"] < 0.25


def test_manifest_matches_every_frozen_table_the_package_ships():
    """A frozen table copied into the package must carry exactly the recorded fold (no row
    moved into or out of it), and every one must be in the manifest."""
    assert check(kernels_dir(), MANIFEST) == []
    assert {str(p.relative_to(kernels_dir())) for p in frozen_paths(kernels_dir())} <= {
        t["path"] for t in MANIFEST["tables"]
    }


def test_rule_is_by_whole_shape_and_deterministic():
    keys = frozen_fold.shape_keys(
        "t.parquet",
        {"num_heads": np.array([8, 8, 16, 16] * 50), "dtype": np.array(["a", "b"] * 100)},
        ("dtype", "num_heads"),
    )
    mask = frozen_fold.in_test_fold(keys)
    assert np.array_equal(mask, frozen_fold.in_test_fold(list(reversed(keys)))[::-1])
    for k in set(keys):  # every row of a shape on the same side
        assert len({bool(m) for m, kk in zip(mask, keys, strict=True) if kk == k}) == 1
    names = frozen_fold.key_columns(
        ["batch_size", "num_heads", "latency", "distribution", "kernel_source"],
        ["i", "i", "f", "U", "U"],
    )
    assert names == ("kernel_source", "num_heads")
    assert not frozen_fold.frozen_table(frozen_fold.DEVELOPED[0])
    assert frozen_fold.frozen_table("gb200/moe/sglang/0.5.14/moe_perf.parquet")
    assert not frozen_fold.frozen_table("h100_sxm/moe/sglang/0.5.10/moe_perf.parquet")


def test_the_development_reader_drops_the_test_fold(tmp_path):
    """The same table under an unfrozen and a frozen place: the reader every fit, residual
    field, development fold and price goes through (table_loaders -> KernelDB.tables) keeps
    every row of the first and none of the second's test fold."""
    src = kernels_dir() / SAMPLE
    open_dst = tmp_path / "open" / SAMPLE
    frozen_rel = "h100_sxm/attention/vllm/0.19.0/generation_attention_perf.parquet"
    frozen_dst = tmp_path / "frozen" / frozen_rel
    for dst in (open_dst, frozen_dst):
        dst.parent.mkdir(parents=True)
        shutil.copy(src, dst)
    key = ("h100_sxm", "vllm", "generation_attention")
    every = table_loaders(tmp_path / "open")[key]()
    dev = table_loaders(tmp_path / "frozen")[key]()
    table, test, _ = frozen_test_rows(frozen_dst)
    assert 0 < test.sum() < len(test) == table.num_rows
    assert len(dev.latency) == len(every.latency) - int(test.sum())
    with pytest.raises(Exception, match="no frozen test fold"):
        frozen_test_rows(open_dst)


def test_only_the_final_test_error_reads_the_test_fold():
    """``frozen_test_rows`` (the manifest's reader) is called nowhere in the package;
    ``frozen_fold_loaders`` (the test-fold rows for a price) only by the final test error
    (``calibrate --kernels --test-fold``: commands/calibrate.py), and the reader's
    ``test_fold`` switch is turned on only inside ``frozen_fold_loaders``."""
    callers: dict[str, list[str]] = {"frozen_test_rows": [], "frozen_fold_loaders": []}
    switched = []
    for path in (ROOT / "src" / "moeplan").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            for name, found in callers.items():
                if isinstance(node, ast.Name | ast.Attribute) and name in (
                    getattr(node, "id", None),
                    getattr(node, "attr", None),
                ):
                    found.append(path.name)
            if isinstance(node, ast.keyword) and node.arg == "test_fold":
                switched.append(path.name)
    assert callers["frozen_test_rows"] == []
    assert callers["frozen_fold_loaders"] == ["calibrate.py"]
    assert switched == ["kernel_tables.py"]


def test_the_test_fold_reader_returns_exactly_the_rows_the_database_drops():
    """A frozen table's development rows and its test-fold rows partition its rows."""
    key = ("gb200", "vllm", "generation_mla_module")
    dev = table_loaders()[key]()
    test = frozen_fold_loaders(("gb200",))[key]()
    path = Path(dev.origin)
    table, mask, _ = frozen_test_rows(path)
    assert len(test.latency) == int(mask.sum()) > 0
    assert len(dev.latency) + len(test.latency) == table.num_rows
    every = sorted(np.asarray(table.column("latency").to_pylist()) * 1e-3)
    both = sorted(np.concatenate([dev.latency, test.latency]))
    assert np.allclose(every, both)


def test_shape_keys_per_shape_equal_the_rule_row_by_row(tmp_path):
    """The reader builds each distinct shape's key once (Arrow's dictionary codes); the keys
    and the fold must be the rule's, written row by row, on integer, string, boolean and
    missing values, in any row order."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    n = 3000
    heads = rng.choice([8, 16, 64, 128], n)
    dtype = rng.choice(["bf16", "fp8", "nvfp4"], n)
    table = pa.table(
        {
            "num_heads": pa.array(heads, pa.int32()),
            "dtype": pa.array(dtype, pa.large_string()),
            "backend": pa.array(rng.choice(["a", "bb", None], n).tolist(), pa.string()),
            "tp_size": pa.array([None if i % 7 == 0 else int(i % 3) for i in range(n)], pa.int64()),
            "causal": pa.array((heads > 16).tolist(), pa.bool_()),
            "num_tokens": pa.array(rng.integers(1, 9000, n), pa.int64()),
            "latency": pa.array(rng.random(n) + 0.1),
        }
    )
    path = tmp_path / "gb200/attention/sglang/0.5.14/context_attention_perf.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path, row_group_size=1000)  # several chunks per column
    _, mask, keys = frozen_test_rows(path)
    names = ("backend", "causal", "dtype", "num_heads", "tp_size")
    vals = {c: np.asarray(table.column(c).to_pylist()).astype(str) for c in names}
    want = [path.name + "|" + "|".join(f"{c}={vals[c][i]}" for c in names) for i in range(n)]
    assert keys == want
    assert "backend=None" in want[next(i for i in range(n) if vals["backend"][i] == "None")]
    hashed = [int.from_bytes(hashlib.sha256(k.encode()).digest()[:8], "big") % 5 == 0 for k in want]
    assert mask.tolist() == hashed
    assert 0 < mask.sum() < n
    assert frozen_fold.fold_mask(path.name, vals, names).tolist() == hashed  # plain columns
