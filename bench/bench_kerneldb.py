"""Kernel database speed: predictions per second, cold and memoised, and table loading.

References measured in the same run: a bare Python α-β evaluation (what the old cost model
did per operation) for the per-call rates, and reading the same Parquet files with pyarrow
alone for the load time. Cold start: a fresh interpreter pricing DeepSeek-V3's first fused-MoE,
MLA prefill/decode, all-reduce and all-to-all on h100-sxm-8 with ``engine="sglang"`` — after
``import moeplan.cli`` as in a command (reference: the same with the store of built variants
off) and bare (reference: the same without an engine); median of :data:`COLD_RUNS` runs.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np

from moeplan.cost.kerneldb import KernelDB, device_for
from moeplan.kernel_tables import read_errors, read_tables, table_devices
from moeplan.specs import load_cluster

COLD_RUNS = 3
COLD_SCRIPT = """
import json, sys, time
t0 = time.perf_counter()
if sys.argv[2] == "cli":
    import moeplan.cli  # what every command has imported before it builds its cost model
from moeplan.kernel_tables import engine_cost_model
from moeplan.specs import load_cluster, load_model
c, m = load_cluster("h100-sxm-8"), load_model("deepseek-v3")
t1 = time.perf_counter()
cm = engine_cost_model(c, None, sys.argv[1] if sys.argv[1] != "none" else None)
cm.expert_ffn(m, 8, 32)
t2 = time.perf_counter()
cm.attention_core(m, 8, 2048, 2048, tp=8)
cm.attention_core(m, 8, 1, 2048, tp=8)
cm.collective("all_reduce", 1 << 20, 8)
cm.collective("all_to_all", 1 << 20, 8)
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "first": t2 - t1, "all": t3 - t1}))
"""


def _cold(engine: str, cache: str, where: str = "bare") -> dict[str, float]:
    """Median seconds of a fresh interpreter: imports, cost model to the first prediction
    (fused MoE) and to all five (MoE, MLA prefill/decode, all-reduce, all-to-all)."""
    env = {**os.environ, "MOEPLAN_CACHE_DIR": cache}
    cmd = [sys.executable, "-c", COLD_SCRIPT, engine, where]
    runs = [
        json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
        for _ in range(COLD_RUNS)
    ]
    return {k: statistics.median(r[k] for r in runs) for k in ("import", "first", "all")}


def _cold_rows() -> list[dict]:
    """DeepSeek-V3 on h100-sxm-8 with engine=sglang in a fresh interpreter."""
    with tempfile.TemporaryDirectory() as tmp:
        off_cli = _cold("sglang", "off", "cli")  # no store: every variant built in the process
        _cold("sglang", tmp)  # fill the store
        cli = _cold("sglang", tmp, "cli")
        warm, off = _cold("sglang", tmp), _cold("sglang", "off")
        ref = _cold("none", "off")

    def total(r: dict[str, float]) -> float:
        return r["import"] + r["first"]

    bare = "fresh `python -c`, import included; reference = the same without an engine"
    return [
        {
            "name": "cold start in a moeplan command: engine cost model to the first "
            "prediction (DeepSeek-V3 MoE, h100-sxm-8, sglang), built variants on disk",
            "value": cli["first"],
            "unit": "s",
            "reference": off_cli["first"],
            "ratio": cli["first"] / off_cli["first"],
            "target": "<= 0.5 s",
            "note": f"after `import moeplan.cli` ({cli['import']:.2f} s); all five ops "
            f"{cli['all']:.2f} s; reference = the same with the store off (first run)",
        },
        *(
            {
                "name": f"cold start, import to the first prediction, {label}",
                "value": total(r),
                "unit": "s",
                "reference": total(ref),
                "ratio": total(r) / total(ref),
                "target": "",
                "note": bare,
            }
            for label, r in (("built variants on disk", warm), ("store off (first run)", off))
        ),
    ]


def _alpha_beta_rate(n: int) -> float:
    t0 = time.perf_counter()
    acc = 0.0
    for i in range(n):
        acc += 3e-6 + 1e-12 * i
    return n / (time.perf_counter() - t0)


def _layer_rates() -> tuple[float, float]:
    from moeplan.kernel_tables import engine_cost_model
    from moeplan.specs import load_model

    c, m = load_cluster("h100-sxm-8"), load_model("deepseek-v3")
    rates = []
    for engine in ("sglang", None):
        cm = engine_cost_model(c, engine=engine)
        cm.expert_ffn(m, 8, 32)  # build the variants outside the timing
        cm.attention_layer(m, 8, 1, 2048, tp=8)
        cm.collective("all_reduce", 1 << 20, 8)
        cm.collective("all_to_all", 1 << 20, 8)
        t0 = time.perf_counter()
        for _ in range(10):
            for i in range(100):
                tokens = 64 * (i + 1)
                cm.attention_layer(m, tokens // 64, 1, 2048, tp=8)
                cm.expert_ffn(m, tokens * m.top_k / m.num_experts, m.num_experts / 8)
                cm.collective("all_to_all", tokens * m.hidden_bytes * m.top_k / 8, 8)
                cm.collective("all_reduce", tokens * m.hidden_bytes, 8)
        rates.append(1000 / (time.perf_counter() - t0))
    return rates[0], rates[1]


def run() -> list[dict]:
    t0 = time.perf_counter()
    tables = read_tables()
    load = time.perf_counter() - t0
    import pyarrow.parquet as pq

    root = Path(str(resources.files("moeplan").joinpath("data", "measured", "kernels")))
    t0 = time.perf_counter()
    for p in root.glob("*/*/*/*/*.parquet"):
        pq.read_table(p)
    raw = time.perf_counter() - t0
    db = KernelDB(tables, table_devices(), read_errors())
    dev = device_for(load_cluster("h100-sxm-8"))
    t0 = time.perf_counter()
    db.predict(
        "moe",
        dev,
        "sglang",
        num_tokens=1,
        hidden_size=4096,
        inter_size=14336,
        topk=2,
        num_experts=8,
    )
    build = time.perf_counter() - t0
    shapes = [
        dict(num_tokens=int(n), hidden_size=4096, inter_size=14336, topk=2, num_experts=8)
        for n in np.unique(np.geomspace(1, 60000, 400).astype(int))
    ]
    t0 = time.perf_counter()
    for s in shapes:
        db.predict("moe", dev, "sglang", **s)
    cold = len(shapes) / (time.perf_counter() - t0)
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        for s in shapes:
            db.predict("moe", dev, "sglang", **s)
    warm = reps * len(shapes) / (time.perf_counter() - t0)
    cols = {
        "num_tokens": np.arange(1, 10001),
        "hidden_size": np.full(10000, 4096),
        "inter_size": np.full(10000, 14336),
        "topk": np.full(10000, 2),
        "num_experts": np.full(10000, 8),
    }
    t0 = time.perf_counter()
    db.predict_many("moe", dev, "sglang", cols)
    batch = 10000 / (time.perf_counter() - t0)
    ref = _alpha_beta_rate(200_000)
    layer, layer_ref = _layer_rates()
    return _cold_rows() + [
        {
            "name": "read all kernel tables",
            "value": load,
            "unit": "s",
            "reference": raw,
            "ratio": load / raw,
            "target": "once per process",
            "note": "reference = pyarrow read of the same files",
        },
        {
            "name": "first MoE prediction (fit + residual field of one kernel variant)",
            "value": build,
            "unit": "s",
            "reference": 1 / ref,
            "ratio": build * ref,
            "target": "once per variant",
            "note": "reference = one bare alpha-beta evaluation",
        },
        {
            "name": "MoE predictions, distinct shapes",
            "value": cold,
            "unit": "evals/s",
            "reference": ref,
            "ratio": cold / ref,
            "target": "",
            "note": "reference = bare alpha-beta evaluations/s",
        },
        {
            "name": "MoE predictions, memoised (planner loop)",
            "value": warm,
            "unit": "evals/s",
            "reference": ref,
            "ratio": warm / ref,
            "target": ">= 100k evals/s",
            "note": "reference = bare alpha-beta evaluations/s",
        },
        {
            "name": "DeepSeek-V3 layer cost (attention+MoE+a2a+all-reduce), engine=sglang, "
            "100 token counts x 10 passes",
            "value": layer,
            "unit": "evals/s",
            "reference": layer_ref,
            "ratio": layer / layer_ref,
            "target": "",
            "note": "reference = the same loop on CostModel without an engine (same run)",
        },
        {
            "name": "MoE predictions, one 10k-row table",
            "value": batch,
            "unit": "rows/s",
            "reference": ref,
            "ratio": batch / ref,
            "target": "",
            "note": "reference = bare alpha-beta evaluations/s",
        },
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
