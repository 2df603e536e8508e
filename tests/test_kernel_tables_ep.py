"""The fused-MoE tables read without their EP > 1 rows (``kernel_tables.EP_ROWS_DROPPED``):
the ratios that single them out, recomputed from the shipped parquet files, and the prices
that replace them.

Oracle: the measured tables themselves. A rank holding ``E / ep`` experts runs ``1 / ep`` of
the layer's GEMM FLOPs; in every table but the dropped ones the measured latency falls with
EP (median EP 8 / EP 1 well below one half over the balanced rows of >= 4,096 tokens), in the
dropped ones it stays near the EP-1 latency."""

from __future__ import annotations

import statistics
from collections import defaultdict

import pyarrow.parquet as pq
import pytest

from moeplan.kernel_tables import EP_ROWS_DROPPED, kernel_db, kernels_dir

#: rows long enough to be GEMM-bound (shorter rows sit near the kernel's floor whatever EP)
MIN_TOKENS = 4096
KEY = ("hidden_size", "inter_size", "num_experts", "topk", "moe_dtype", "moe_tp_size",
       "num_tokens", "kernel_source")  # fmt: skip


def _ep8_ratio(path) -> float | None:
    """Median latency(EP 8) / latency(EP 1) of the same balanced layer, or None (no pairs)."""
    cols = ["latency", "moe_ep_size", "distribution", *KEY]
    t = pq.read_table(path, columns=cols).to_pydict()
    at: dict[tuple, dict[int, float]] = defaultdict(dict)
    for i in range(len(t["latency"])):
        if t["distribution"][i] == "balanced" and t["num_tokens"][i] >= MIN_TOKENS:
            at[tuple(t[c][i] for c in KEY)][int(t["moe_ep_size"][i])] = t["latency"][i]
    ratios = [row[8] / row[1] for row in at.values() if 1 in row and 8 in row]
    return statistics.median(ratios) if ratios else None


def _tables():
    for path in sorted(kernels_dir().glob("*/moe/*/*/moe_perf.parquet")):
        gpu, _, engine, version = path.parts[-5:-1]
        yield (gpu, engine, version), path


def test_the_dropped_tables_are_the_ones_whose_ep_rows_do_not_fall() -> None:
    seen = {}
    for key, path in _tables():
        ratio = _ep8_ratio(path)
        if ratio is not None:
            seen[key] = ratio
    assert set(seen) >= EP_ROWS_DROPPED  # both dropped tables have the rows to judge
    for key, ratio in seen.items():
        if key in EP_ROWS_DROPPED:
            assert ratio > 0.7, (key, ratio)
        else:
            assert ratio < 0.4, (key, ratio)


@pytest.mark.parametrize("key", sorted(EP_ROWS_DROPPED))
def test_a_dropped_table_is_read_with_its_ep1_rows_only(key) -> None:
    gpu, engine, version = key
    db = kernel_db(engine, version)
    table = db.tables[(gpu, engine, "moe")]
    assert table.version == version
    assert len(table.latency) > 0
    assert set(map(int, table.columns["moe_ep_size"])) == {1}


def test_an_ep_rank_on_a100_sglang_is_priced_at_its_share_of_the_layer() -> None:
    """GLM-4.5-Air's MoE layer at 8,192 tokens on A100, SGLang: EP 4 and TP 4 each run a quarter
    of the layer's FLOPs, so both are priced near a quarter of EP 1 (the measured H100 SGLang
    0.5.9 table, same Triton kernel: EP 4 / EP 1 = 0.27 for DeepSeek-V3's layer at 8,192
    tokens); the dropped rows priced EP 4 at the whole layer's time."""
    db = kernel_db("sglang")
    dev = db.devices["a100_sxm"]
    layer = dict(num_tokens=8192, hidden_size=4096, inter_size=1408, topk=8, num_experts=128,
                 distribution="balanced", moe_dtype="bfloat16")  # fmt: skip
    one = db.predict("moe", dev, "sglang", moe_tp_size=1, moe_ep_size=1, **layer)
    ep4 = db.predict("moe", dev, "sglang", moe_tp_size=1, moe_ep_size=4, **layer)
    tp4 = db.predict("moe", dev, "sglang", moe_tp_size=4, moe_ep_size=1, **layer)
    assert 0.15 < ep4.seconds / one.seconds < 0.4
    assert 0.7 < ep4.seconds / tp4.seconds < 1.4
    assert ep4.source == "transferred"  # no measured EP row stands behind it
