"""``moeplan serve-sim``: JSON interface keys, --plan equals the layout flags, one-line errors."""

from __future__ import annotations

import json

import pytest

from cli_run import run_main
from moeplan.planners.plan import Plan
from moeplan.serve.metrics import INTERFACE_METRICS

BASE = [
    "serve-sim",
    "--model",
    "qwen3-30b-a3b",
    "--cluster",
    "h100-sxm-8",
    "--requests",
    "150",
    "--isl",
    "1024",
    "--osl",
    "64",
    "--json",
]
KEYS = set(INTERFACE_METRICS)


def _run(capsys, *args: str) -> tuple[int, str, str]:
    return run_main(capsys, *args)


def _strategy_plan(tmp_path, family: str = "strategy") -> str:
    layout = {"world_size": 4, "attn": {"tp": 2, "dp": 2}, "moe": {"tp": 1, "ep": 4}, "pp": 1}
    if family == "dep":
        layout = {"world_size": 8, "ag": 4, "eg": 4}
    p = Plan(family=family, model="qwen3-30b-a3b", cluster="h100-sxm-8", layout=layout)
    path = tmp_path / "plan.json"
    path.write_text(p.to_json(), encoding="utf-8")
    return str(path)


def test_json_has_the_interface_metrics(capsys, tmp_path):
    trace = tmp_path / "serve.trace.json"
    code, out, err = _run(
        capsys, *BASE, "--attn-tp", "2", "--moe-ep", "2", "--rate", "3", "--trace-out", str(trace)
    )
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["metrics"]) >= KEYS
    assert doc["gpus"] == 2 and doc["workload"]["rate_rps"] == 3.0
    assert doc["metrics"]["output_tokens_per_s_per_gpu"] == pytest.approx(
        doc["metrics"]["output_tokens_per_s"] / 2
    )
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == doc["metrics"]["iterations"]
    # price_sources: the run's busy seconds (its trace's iterations) split by price source
    busy = sum(e["dur"] for e in events if e["ph"] == "X") / 1e6
    ps = doc["price_sources"]
    assert sum(r["seconds"] for r in ps.values()) == pytest.approx(busy, rel=1e-6)
    assert sum(r["share"] for r in ps.values()) == pytest.approx(1.0, abs=1e-12)


def test_plan_file_equals_the_same_layout_flags(capsys, tmp_path):
    args = [*BASE, "--rate", "4", "--chunk-tokens", "4096", "--max-running", "64"]
    c1, by_plan, e1 = _run(capsys, *args, "--plan", _strategy_plan(tmp_path))
    c2, by_flags, e2 = _run(capsys, *args, "--attn-tp", "2", "--attn-dp", "2", "--moe-ep", "4")
    assert c1 == c2 == 0, (e1, e2)
    a, b = json.loads(by_plan), json.loads(by_flags)
    assert a["layout"] == b["layout"] and a["metrics"] == b["metrics"]
    assert a["engine"]["chunk_tokens"] == 4096 and a["engine"]["max_running"] == 64


def test_without_rate_it_runs_at_the_largest_rate_meeting_the_slos(capsys):
    code, out, err = _run(capsys, *BASE, "--attn-tp", "2", "--moe-ep", "2")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["workload"]["rate_rps"] == doc["metrics"]["max_rate_meeting_slo_rps"] > 0
    assert doc["meets_slo"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--rate", "1", "--concurrency", "4"], "exclusive"),
        (["--isl-dist", "uniform:9:5"], "exclusive"),
        (["--osl", "0"], "--osl"),
        (["--prefix-hit", "1.5"], "prefix_hit"),
        (["--cv", "2"], "--arrival gamma"),
        (["--micro-batches", "2"], "--pp > 1"),
        (["--attn-tp", "3", "--moe-tp", "3"], "num_attention_heads"),
        (["--engine", "trt"], "--engine"),
        (["--ttft-slo", "0"], "--ttft-slo"),
        (["--cost-engine", "tables"], "--cost-engine"),
    ],
)
def test_bad_flags_are_one_line_exit_2(capsys, extra, needle):
    code, _, err = _run(capsys, *BASE, *extra)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


def test_plan_with_layout_flags_or_dep_family_is_rejected(capsys, tmp_path):
    code, _, err = _run(capsys, *BASE, "--plan", _strategy_plan(tmp_path), "--pp", "2")
    assert code == 2 and "exclusive" in err
    code, _, err = _run(capsys, *BASE, "--plan", _strategy_plan(tmp_path, "dep"))
    assert code == 2 and "not simulated" in err


def test_bad_length_distribution_is_one_line(capsys):
    code, _, err = _run(
        capsys,
        "serve-sim",
        "--model",
        "qwen3-30b-a3b",
        "--cluster",
        "h100-sxm-8",
        "--isl-dist",
        "gauss:3",
        "--json",
    )
    assert code == 2 and "length ('gauss:3')" in err


def test_pipeline_plan_layout_takes_each_blocks_most_common_choice():
    from moeplan.commands.serve_plan import layout_from_plan

    mods = [
        {"kind": "attn", "tp": 2, "ep": 1, "dpmoe": 1},
        {"kind": "moe", "tp": 1, "ep": 2, "dpmoe": 1},
    ] * 3
    mods += [{"kind": "moe", "tp": 2, "ep": 1, "dpmoe": 1}]
    plan = Plan(
        family="pipeline",
        model="m",
        cluster="c",
        layout={"world_size": 4, "pp": 2, "stages": [{"modules": mods}] * 2},
    )
    lay = layout_from_plan(plan)
    assert (lay.attn_tp, lay.attn_dp, lay.moe_tp, lay.moe_ep, lay.pp) == (2, 1, 1, 2, 2)


def test_closed_loop_concurrency_runs_and_says_so(capsys):
    code, out, err = _run(capsys, *BASE, "--attn-tp", "2", "--moe-ep", "2", "--concurrency", "8")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["workload"]["concurrency"] == 8 and doc["workload"]["rate_rps"] is None
    assert doc["metrics"]["requests"] == 150


def test_cost_engine_prices_kernels_like_plan(capsys):
    """``--cost-engine engine`` (default) prices iterations from the engine's measured kernels,
    as ``moeplan plan`` does; ``none`` is the calibrated GEMM/NCCL model. Oracle: the library
    (knob search, then the run at the rate) on the same cost models gives the same figures."""

    flags = ["--attn-tp", "2", "--moe-ep", "2", "--rate", "2"]
    docs = {}
    for ce in ("engine", "none"):
        code, out, err = _run(capsys, *BASE, *flags, "--cost-engine", ce)
        assert code == 0, err
        docs[ce] = json.loads(out)
    assert docs["engine"]["pricing"]["engine"] == "sglang"
    assert docs["none"]["pricing"]["engine"] is None
    assert docs["none"]["price_sources"]["roofline"]["share"] == pytest.approx(1.0, abs=1e-12)
    kernel = docs["engine"]["price_sources"]
    assert kernel["measured"]["share"] + kernel["interpolated"]["share"] > 0.0
    for ce in ("engine", "none"):  # steady state at 2 req/s: what arrives is served
        got = docs[ce]["metrics"]["output_tokens_per_s_per_gpu"]
        assert got == pytest.approx(2.0 * 64 / 2, rel=1e-9)  # 64 output tokens, 2 GPUs
    ttft = [docs[ce]["metrics"]["ttft_p90_s"] for ce in ("engine", "none")]
    assert ttft[0] != pytest.approx(ttft[1], rel=1e-3)  # the kernel prices change the answer
