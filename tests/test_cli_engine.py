"""``--engine`` on every planning command and the kernel tables' I/O layer.

Oracles:

- each command's headline figure with ``--engine E`` equals the same planner called in-process
  on :func:`moeplan.kernel_tables.engine_cost_model` of ``E`` (the library with that engine's
  tables handed in) — so the flag reaches the prices — and sglang and vllm give different
  figures wherever their fused-MoE tables give different times for the model's shape;
- ``--json``'s ``pricing`` is consistent with :meth:`CostModel.provenance` (shares sum to one,
  lookups add up, a GPU without tables is priced by transfer only);
- the launch script's header and ``plan.json`` name the engine whose kernels priced the plan;
- the buffer reader equals pyarrow's own ``to_numpy`` (the reference implementation), and a
  database served from the on-disk store equals one built from the tables, without reading
  them; a changed table, a corrupt file or a file others can write is a miss.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from moeplan.cli import main
from moeplan.cost import CostModel
from moeplan.cost.kerneldb import SOURCES, KernelDB, device_for
from moeplan.cost.kerneldb.variant import LazyTables
from moeplan.errors import MoeplanError
from moeplan.kernel_store import _unpack
from moeplan.kernel_tables import (
    DiskStore,
    engine_cost_model,
    kernel_db,
    pricing,
    pricing_line,
    table_devices,
    table_files,
    table_loaders,
)
from moeplan.planners import dep
from moeplan.planners.pipeline import plan_pipeline
from moeplan.planners.placement.planner import PlaceConfig, cost_evaluator, place
from moeplan.planners.rank import plan
from moeplan.planners.strategy.analyzer import analyze
from moeplan.report.plan_report import launch_exports
from moeplan.specs import RoutingProfile, Workload, load_cluster, load_model
from moeplan.specs.presets import model_config
from moeplan.traces.format import iter_trace, save_trace
from moeplan.traces.synthetic import SynthConfig, synthesize

QWEN, LITE = "qwen3-30b-a3b", "deepseek-v2-lite"
STRATEGY = ["strategy", "--model", QWEN, "--cluster", "h100-sxm-8", "--top", "3"]
PIPELINE = ["pipeline", "--model", QWEN, "--cluster", "smidt-a40", "--pp", "2"]
DEP = ["dep", "--model", LITE, "--cluster", "findep-c", "--ag", "1", "--eg", "1", "--isl",
       "128", "--layers", "2"]  # fmt: skip
WORKLOAD = Workload(phase="both", batch=32, isl=2048, osl=256)  # the CLI defaults
PLACE_CFG = PlaceConfig(ep=8, mode="dp", baselines=False, seed=0)  # the CLI's, --no-baselines


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """DeepSeek-V2-Lite cut to 3 layers (2 MoE) as a config.json, and a short trace for it:
    Sem-MoE's solve on the full model takes ~20 s, on this one well under a second."""
    folder = tmp_path_factory.mktemp("engine")
    config = {**model_config(LITE), "num_hidden_layers": 3}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    cfg = SynthConfig(num_requests=16, num_layers=2, min_len=16, max_len=64, seed=0)
    save_trace(synthesize(cfg), folder / "t.parquet")
    return folder


def _place_args(trace) -> list[str]:
    model = str(trace / "config.json")
    return ["place", "--trace", str(trace / "t.parquet"), "--model", model, "--ep", "8",
            "--no-baselines"]  # fmt: skip


def _json(capsys, args: list[str]) -> dict:
    main([*args, "--json"])
    return json.loads(capsys.readouterr().out)


def _strategy(d: dict) -> float:
    return d["strategies"][0]["ttft_s"]


def _lib_strategy(engine: str | None) -> float:
    c = load_cluster("h100-sxm-8")
    return (
        analyze(load_model(QWEN), c, WORKLOAD, engine_cost_model(c, None, engine))
        .strategies[0]
        .ttft_s
    )


def _lib_pipeline(engine: str | None) -> float:
    m, c = load_model(QWEN), load_cluster("smidt-a40")
    w = Workload(phase="both", batch=32, isl=2048, osl=256, routing=RoutingProfile.static(m.top_k))
    return plan_pipeline(m, c, w, engine_cost_model(c, None, engine), pp=2).plan.bottleneck_s


def _lib_dep(engine: str | None) -> float:
    c = load_cluster("findep-c")
    report = dep.plan_dep(load_model(LITE), c, engine_cost_model(c, None, engine), seq_len=128,
                          ag=1, eg=1, layers=2, batch=64)  # fmt: skip
    return dep.report_dict(report)["throughput_tokens_per_s"]


def _lib_place(trace, engine: str | None) -> float:
    m, c = load_model(str(trace / "config.json")), load_cluster("h100-sxm-8")
    path = trace / "t.parquet"
    res = place(lambda: iter_trace(path, num_experts=m.num_experts), num_layers=m.num_moe_layers,
                num_experts=m.num_experts, hidden_bytes=m.hidden_bytes,
                evaluate=cost_evaluator(engine_cost_model(c, None, engine), m, 8, 1),
                cfg=PLACE_CFG)  # fmt: skip
    return res.methods["semmoe"].metrics["moe_layer_time_s"]


COMMANDS = {
    "strategy": (lambda _: STRATEGY, _strategy, lambda _, e: _lib_strategy(e)),
    "pipeline": (lambda _: PIPELINE, lambda d: d["bottleneck_s"], lambda _, e: _lib_pipeline(e)),
    "dep": (lambda _: DEP, lambda d: d["throughput_tokens_per_s"], lambda _, e: _lib_dep(e)),
    "place": (
        _place_args,
        lambda d: d["methods"]["semmoe"]["moe_layer_time_s"],
        _lib_place,
    ),
}
#: (model, cluster) of each command, for the check that the engines' MoE tables differ there
MOE_SHAPE = {"strategy": (QWEN, "h100-sxm-8"), "pipeline": (QWEN, "smidt-a40"),
             "dep": (LITE, "findep-c"), "place": (LITE, "h100-sxm-8")}  # fmt: skip


def _check_pricing(p: dict, engine: str, cluster: str) -> None:
    assert p["engine"] == engine and p["lookups"] > 0
    assert set(p["sources"]) <= set(SOURCES)
    assert sum(v["share"] for v in p["sources"].values()) == pytest.approx(1.0)
    calls = sum(cell["calls"] for cells in p["ops"].values() for cell in cells.values())
    assert calls == p["lookups"] == sum(v["lookups"] for v in p["sources"].values())
    dev = device_for(load_cluster(cluster))
    assert p["tables_gpu"] == dev.table and p["transferred_gpu"] == (dev.table is None)
    if dev.table is None:  # no tables for this GPU: nothing can be measured or interpolated
        assert set(p["sources"]) <= {"transferred", "roofline"}
        assert "no measured tables" in p["note"]


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_engine_sets_the_kernel_prices(cmd, capsys, trace):
    args, figure, library = COMMANDS[cmd]
    m, c = load_model(MOE_SHAPE[cmd][0]), load_cluster(MOE_SHAPE[cmd][1])
    moe = {e: engine_cost_model(c, None, e).expert_ffn(m, 64, m.num_experts // 8)
           for e in ("sglang", "vllm")}  # fmt: skip
    assert moe["sglang"] != pytest.approx(moe["vllm"], rel=1e-3)  # the tables differ here
    got = {}
    for engine in ("sglang", "vllm"):
        d = _json(capsys, [*args(trace), "--engine", engine])
        assert d["engine"] == engine
        _check_pricing(d["pricing"], engine, MOE_SHAPE[cmd][1])
        assert "moe" in d["pricing"]["ops"]
        got[engine] = figure(d)
        assert got[engine] == pytest.approx(library(trace, engine), rel=1e-9)
    assert got["sglang"] != pytest.approx(got["vllm"], rel=1e-3)


def test_engine_none_is_the_model_without_kernels(capsys):
    d = _json(capsys, [*DEP, "--engine", "none"])
    assert d["pricing"]["engine"] is None and d["pricing"]["sources"] == {}
    assert d["throughput_tokens_per_s"] == pytest.approx(_lib_dep(None), rel=1e-9)


@pytest.mark.parametrize("cmd", ["strategy", "pipeline", "dep", "place"])
def test_unknown_engine_is_one_line_exit_2(cmd, capsys, trace):
    with pytest.raises(SystemExit) as stop:
        main([*COMMANDS[cmd][0](trace), "--engine", "tgi"])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1
    assert "--engine ('tgi') must be one of sglang, vllm, trtllm, none" in err


def test_launch_script_and_plan_name_the_pricing_engine(capsys, tmp_path):
    out = tmp_path / "s"
    main([*STRATEGY, "--engine", "sglang", "--export", "vllm", "--out", str(out)])
    text = capsys.readouterr().out
    assert "kernel prices: sglang kernels from NVIDIA's measured sglang tables on h100_sxm" in text
    head = [ln for ln in (out / "vllm.sh").read_text().splitlines() if ln.startswith("#")]
    line = next(ln for ln in head if "kernel prices" in ln)
    assert "sglang kernels" in line and "sources of" in line
    plan = json.loads((out / "plan.json").read_text())
    assert plan["details"]["pricing"]["engine"] == "sglang"
    main([*PIPELINE, "--engine", "vllm", "--out", str(tmp_path / "p")])
    text = " ".join(capsys.readouterr().out.split())
    assert "no measured tables for a40: vllm kernels transferred from the a100_sxm" in text
    pplan = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert pplan["details"]["pricing"]["transferred_gpu"] is True


def test_plan_scripts_name_the_engine_that_priced_the_plan():
    """``moeplan plan``'s launch scripts (built as its artifacts are, with the pricing line):
    both engines' scripts name the pricing engine (vLLM's kernels here), not the engine each
    script launches."""
    m, c = load_model(QWEN), load_cluster("h100-sxm-8")
    cm = engine_cost_model(c, None, "vllm")
    result = plan(m, c, WORKLOAD, cm, families=("strategy",))
    exports = launch_exports(
        result,
        result.winner.plan,
        model_path="Qwen/Qwen3-30B-A3B",
        full_layers=m.num_layers,
        pricing=pricing_line(pricing(cm)),
    )
    for script, ex in exports.items():
        text = ex.text
        head = [ln for ln in text.splitlines() if ln.startswith("# ")]
        assert any("kernel prices: vllm kernels from NVIDIA's measured vllm tables" in ln
                   for ln in head), script  # fmt: skip


def test_cost_model_takes_the_tables_from_the_io_layer():
    c = load_cluster("h100-sxm-8")
    with pytest.raises(MoeplanError, match=r"kernels \(None\) must be a KernelDB"):
        CostModel(c, engine="sglang")
    assert engine_cost_model(c, None, "vllm")._kdb is kernel_db()  # one database per process


@pytest.mark.parametrize("key", [("h100_sxm", "sglang", "moe"),
                                 ("h100_sxm", "sglang", "deepep_normal_dispatch")])  # fmt: skip
def test_buffer_reader_matches_pyarrow(key):
    import pyarrow.parquet as pq

    from moeplan.kernel_tables import FILES

    path, args = table_files()[key]
    t = table_loaders()[key]()
    ref = pq.read_table(path)
    op, rename, lat, scale = next(f for f in FILES[path.name] if f[0] == key[2])
    latency = sum(ref.column(c).to_numpy().astype(float) for c in lat) * scale
    ok = np.isfinite(latency) & (latency > 0)
    np.testing.assert_allclose(t.latency, latency[ok], rtol=1e-12)
    for col, values in t.columns.items():
        src = rename.get(col, col)
        if src in ref.column_names:
            want = ref.column(src).to_numpy(zero_copy_only=False)[ok]
            assert values.tolist() == want.tolist(), col


STORE_KEY = ("a100_sxm", "vllm", "moe")
SHAPES = {"num_tokens": np.array([1, 48, 3000]), "hidden_size": np.full(3, 2048),
          "inter_size": np.full(3, 768), "topk": np.full(3, 8), "num_experts": np.full(3, 128)}  # fmt: skip


def _db(root, loaders=None, files=None) -> KernelDB:
    files = files or {k: p for k, (p, _) in table_files().items()}
    devices = table_devices()
    lazy = LazyTables(loaders or table_loaders())
    return KernelDB(lazy, devices, store=DiskStore(root, files, devices))


def _predict(db: KernelDB) -> list[tuple[float, str]]:
    dev = device_for(load_cluster("a100-sxm-8"))
    return [(p.seconds, p.source) for p in db.predict_many("moe", dev, "vllm", SHAPES)]


def test_store_serves_the_same_variants_without_reading_tables(tmp_path):
    built = _predict(_db(tmp_path))
    stored = sorted(tmp_path.glob("a100_sxm-vllm-moe@*.npz"))
    assert len(stored) >= 2 and all(os.stat(p).st_mode & 0o077 == 0 for p in stored)

    def unread():
        raise AssertionError("table read although the variant is stored")

    loaders = {k: unread for k in table_loaders()}
    assert _predict(_db(tmp_path, loaders)) == built  # the same stored numbers, bit for bit


def test_store_misses_on_a_changed_table_a_corrupt_or_foreign_file(tmp_path):
    root = tmp_path / "store"
    built = _predict(_db(root))
    files = {k: p for k, (p, _) in table_files().items()}
    # same release folder and rows, one more byte: another content key
    other = tmp_path / files[STORE_KEY].parent.name / "moe_perf.parquet"
    other.parent.mkdir()
    other.write_bytes(files[STORE_KEY].read_bytes() + b"\0")
    stale = DiskStore(root, {**files, STORE_KEY: other}, table_devices())
    store = DiskStore(root, files, table_devices())
    key = ("variants", *STORE_KEY)
    assert stale.get(key) is None and store.get(key) is not None
    for path in root.glob("*.npz"):
        path.write_bytes(b"not an npz")
    assert _predict(_db(root)) == built  # rebuilt and rewritten
    assert all(_unpack(p.read_bytes()) is not None for p in root.glob("*-variants-*.npz"))
    (counts,) = root.glob("a100_sxm-vllm-moe@*-variants-*.npz")
    counts.chmod(0o620)  # writable by others: never read
    assert store.get(key) is None
    counts.chmod(0o600)
    assert store.get(key) is not None
    stale.put(key, {("x",): 1})  # the newer table's file replaces the older one
    assert len(list(root.glob("a100_sxm-vllm-moe@*-variants-*.npz"))) == 1
    assert store.get(key) is None and stale.get(key) == {("x",): 1}
