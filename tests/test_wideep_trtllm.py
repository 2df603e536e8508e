"""TRT-LLM's wide-EP MoE (op ``trtllm_wideep_moe``, cost/kerneldb/wideep_features.py and
eplb_load.py) against NVIDIA's measured rows, whole shapes held out, and the project's own
EPLB packing (load.eplb_busiest, written separately) on the generator's loads."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from moeplan.cost.kerneldb.eplb_load import _loads, eplb_power_law_many
from moeplan.cost.kerneldb.evaluate import heldout_shapes
from moeplan.cost.kerneldb.load import eplb_busiest
from moeplan.kernel_tables import engine_cost_model, kernel_db, kernels_dir
from moeplan.specs import load_cluster, load_model

TABLE = kernels_dir() / "h100_sxm" / "moe" / "trtllm" / "1.3.0rc10" / "wideep_moe_perf.parquet"


@pytest.mark.parametrize(
    ("n", "ep", "slots", "alpha"),
    [(4096, 32, 288, 1.01), (64, 8, 256, 1.2), (16384, 64, 384, 1.01), (3, 16, 288, 1.2)],
)
def test_eplb_load_equals_the_projects_packing_per_draw(n, ep, slots, alpha):
    """Replication and greedy placement, vectorised over draws, give the busiest rank that
    load.eplb_busiest (the project's EPLB on explicit counts) gives draw by draw; the
    generator's loads keep N k pairs and the per-expert cap of N."""
    e = 384 if slots == 384 else 256
    loads = _loads(n, e, 8, alpha)
    assert np.all(loads.sum(axis=1) == n * 8) and loads.max() <= n
    want = np.mean([eplb_busiest(row, ep, slots - e) for row in loads], axis=0)
    got = eplb_power_law_many(*(np.array([v], float) for v in (n, e, 8, ep, alpha, slots)))
    assert got[0][0] == pytest.approx(want[0], rel=1e-9)
    assert got[1][0] == pytest.approx(want[1], rel=1e-9)


def test_heldout_whole_shapes_meet_the_kernel_bar():
    """Whole shapes held out (one of the five folds): median <= 10 %, p90 <= 25 % — the bar
    of the engines' fused-MoE tables (test_cost_kerneldb_heldout)."""
    s = heldout_shapes(kernel_db(), "h100_sxm", "trtllm", "trtllm_wideep_moe", max_folds=1)
    assert s is not None and len(s.err) > 500
    assert float(np.median(s.err)) <= 0.10 and float(np.percentile(s.err, 90)) <= 0.25


def test_wide_ep_on_trtllm_prices_the_rank_from_its_table():
    """TRT-LLM's wide-EP path prices the CUTLASS MoE on the rank's slots: at a balanced
    load (EPLB with 32 redundant slots over EP32, where the generator's busiest rank is 1.001x
    the mean) within 20 % of the measured EPLB row of DeepSeek-V3's shape."""
    rows = [
        r for r in pq.read_table(TABLE).to_pylist()
        if (r["hidden_size"], r["moe_ep_size"], r["num_slots"]) == (7168, 32, 288)
        and r["distribution"] == "power_law_1.01_eplb" and r["num_tokens"] >= 4096
    ]  # fmt: skip
    assert rows
    w = engine_cost_model(load_cluster("h100-sxm-8", 4), engine="trtllm").wide_ep
    md = load_model("deepseek-v3")
    for r in rows:
        t = r["num_tokens"] / 32
        got = w.moe(md, t, 32, redundant=32, phase="context", batch_spread=False).gemm
        assert got == pytest.approx(r["latency"] * 1e-3, rel=0.2), r["num_tokens"]
