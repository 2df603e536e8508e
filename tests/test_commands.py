"""The commands' answers called directly (:mod:`moeplan.commands`), without a command line:
inputs checked with one-line errors, settings derived from the specs, results assembled."""

from __future__ import annotations

from pathlib import Path

import pytest

from moeplan.commands import plan as plan_cmd
from moeplan.commands import serve_inputs
from moeplan.commands.place import sglang_flags
from moeplan.commands.run import check_sizes, run_summary
from moeplan.commands.strategy import node_sizes
from moeplan.commands.trace import check_trace_path, synth_config
from moeplan.errors import MoeplanError
from moeplan.specs import load_cluster, load_model


def test_serve_inputs_are_the_slos_and_stream_of_the_flags():
    slo, w = serve_inputs.serve_inputs(
        ttft_slo=500.0, tpot_slo=50.0, slo_percentile=99.0, requests=400, rate=None,
        concurrency=None, arrival="poisson", cv=1.0, lengths=(None, None, 64, None),
        prefix_hit=0.0, think_ms=0.0, seed=3,
    )  # fmt: skip
    assert (slo.ttft_s, slo.tpot_s, slo.percentile) == (0.5, 0.05, 99.0)
    assert w.isl.mean == serve_inputs.DEFAULT_ISL and w.osl.mean == 64
    assert w.rate == 1.0 and w.concurrency is None and w.num_requests == 400 and w.seed == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"slo_percentile": 95.0}, "--slo-percentile"),
        ({"lengths": (100, "uniform:1:9", None, None)}, "exclusive"),
        ({"think_ms": 5.0}, "--think-ms applies to a closed loop"),
    ],
)
def test_serve_inputs_refuse_bad_flags_in_one_line(change, message):
    args = dict(
        ttft_slo=500.0, tpot_slo=50.0, slo_percentile=90.0, requests=100, rate=2.0,
        concurrency=None, arrival="poisson", cv=1.0, lengths=(None, None, None, None),
        prefix_hit=0.0, think_ms=0.0, seed=0,
    )  # fmt: skip
    with pytest.raises(MoeplanError, match=message):
        serve_inputs.serve_inputs(**{**args, **change})


def test_check_flags_refuses_rate_with_concurrency():
    with pytest.raises(MoeplanError, match="--rate and --concurrency are exclusive"):
        serve_inputs.check_flags("sglang", 1.0, 4, 100, None, None, "poisson", 1.0)


def test_plan_knob_search_fixes_the_given_knobs():
    ks = plan_cmd.knob_search(None, True, 0, None, "fp8", "deepep")
    assert ks.given == frozenset({"tbo", "a2a"}) and ks.a2a == "deepep"
    assert ks.base.tbo and ks.base.kv_dtype == "fp8"
    with pytest.raises(MoeplanError, match="--mtp-accept"):
        plan_cmd.knob_search(None, None, 1, None, "auto", None)


def test_serve_workload_keeps_the_rate_given_and_reads_distributions():
    w = plan_cmd.read_workload(None, 1024, 64, 8, None)
    sw = plan_cmd.serve_workload(w, 120, 3.0, "uniform:100:300", None, 7)
    assert sw.rate == 3.0 and sw.isl.mean == 200 and sw.osl.mean == 64 and sw.seed == 7
    placeholder = plan_cmd.serve_workload(w, 120, None, None, None, 0)
    assert placeholder.rate == 1.0 and placeholder.concurrency is None


def test_node_sizes_are_powers_of_two_below_the_cluster_and_it():
    assert node_sizes(load_cluster("h100-sxm-8", 6)) == [1, 2, 4, 6]
    assert node_sizes(load_cluster("h100-sxm-8")) == [1]


def test_synth_config_groups_divide_the_experts():
    m = load_model("qwen3-30b-a3b")  # 128 experts
    cfg = synth_config(m, 10, 1)
    assert cfg.num_groups == 16 and cfg.num_experts == 128 and cfg.num_layers == m.num_moe_layers
    assert cfg.vocab_size == min(m.vocab_size, 32000)


def test_check_trace_path_refuses_other_suffixes_and_folders(tmp_path: Path):
    check_trace_path(tmp_path / "t.npz")
    with pytest.raises(MoeplanError, match="must end in .npz or .parquet"):
        check_trace_path(tmp_path / "t.csv")
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(MoeplanError, match="is a directory"):
        check_trace_path(tmp_path / "d.npz")


def test_sglang_flags_name_the_redundant_experts_only_when_replicated(tmp_path: Path):
    f = tmp_path / "loc.json"
    assert sglang_flags(f, 8, 64, 64) == ["--init-expert-location", str(f.resolve()),
                                          "--ep-size", "8"]  # fmt: skip
    assert sglang_flags(f, 8, 72, 64)[-2:] == ["--ep-num-redundant-experts", "8"]


def test_run_summary_takes_rank_zeros_timelines_and_the_largest_error():
    ok = {"ok": True, "result": {"rank": 0, "max_abs_err": 1e-3, "family": "strategy",
                                 "trace": "t.json", "wall_s": 1.0}}  # fmt: skip
    other = {"ok": True, "result": {"rank": 1, "max_abs_err": 2e-3, "wall_s": 1.0}}
    failed = {"ok": False, "kind": "user", "error": "bad"}
    s = run_summary([ok, other, failed], 3)
    assert s["max_abs_err"] == 2e-3 and not s["ok"] and s["failures"][0]["rank"] == 2
    assert s["family"] == "strategy" and s["trace"] == "t.json"


def test_check_sizes_bounds_tokens():
    check_sizes(64, None, None)
    with pytest.raises(MoeplanError, match="--isl"):
        check_sizes(64, 0, None)


def test_plan_warnings_name_a_truncated_model():
    from types import SimpleNamespace

    full = load_model("qwen3-30b-a3b")
    spec = SimpleNamespace(model=full.with_layers(4), full_model=full)
    (line,) = plan_cmd.plan_warnings(spec, SimpleNamespace(quant=None))  # type: ignore[arg-type]
    assert line.startswith(f"planned on the first 4 of {full.num_layers} layers (--layers)")
    whole = SimpleNamespace(model=full, full_model=full)
    assert plan_cmd.plan_warnings(whole, SimpleNamespace(quant=None)) == []  # type: ignore[arg-type]
