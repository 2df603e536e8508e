"""``moeplan pipeline``: JSON keys, --verify, files, and one-line errors with exit 2."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from moeplan.cli import main


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = 0
    try:
        main(["pipeline", *args])
    except SystemExit as ex:
        code = int(ex.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture()
def small_model(tmp_path):
    """Qwen3-30B-A3B's config cut to 4 layers (N <= 6 for the exhaustive check)."""
    text = (
        resources.files("moeplan.specs.presets")
        .joinpath("configs", "Qwen3-30B-A3B.json")
        .read_text(encoding="utf-8")
    )
    cfg = json.loads(text)
    cfg["num_hidden_layers"] = 4
    cfg["max_window_layers"] = 4
    path = tmp_path / "qwen3-4l.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_json_has_the_issue_keys(capsys, tmp_path):
    code, out, _ = _run(
        capsys,
        "--model",
        "qwen3-235b-a22b",
        "--cluster",
        "smidt-a40",
        "--routing-profile",
        "qwen3-235b-a22b-topp",
        "--phase",
        "prefill",
        "--json",
        "--out",
        str(tmp_path / "pipe"),
    )
    assert code == 0
    d = json.loads(out)  # exactly one JSON object on stdout
    for key in (
        "pp",
        "stages",
        "bottleneck_s",
        "throughput_tokens_per_s",
        "baselines",
        "speedup_vs_uniform",
        "search_ms",
    ):
        assert key in d
    for st in d["stages"]:
        assert {"start_module", "end_module", "modules", "time_s", "mem_bytes_per_gpu"} <= set(st)
        assert {"kind", "layer", "tp", "ep", "dpmoe"} <= set(st["modules"][0])
    for name in ("uniform", "time_balanced", "no_pp"):
        assert "throughput_tokens_per_s" in d["baselines"][name]
    assert d["bottleneck_s"] == max(st["time_s"] for st in d["stages"])
    plan = json.loads((tmp_path / "pipe" / "plan.json").read_text())
    assert plan["schema"] == "moeplan.plan/1" and plan["family"] == "pipeline"
    assert "plotly" in (tmp_path / "pipe" / "stages.html").read_text()[:20000].lower()


def test_verify_reports_the_exhaustive_optimum(capsys, small_model):
    code, out, _ = _run(
        capsys,
        "--model",
        small_model,
        "--cluster",
        "a100-sxm-8",
        "--top-p",
        "0.7",
        "--verify",
        "--json",
    )
    assert code == 0
    d = json.loads(out)
    assert d["method"] == "exhaustive"
    assert d["exhaustive_bottleneck_s"] <= d["bottleneck_s"] <= d["exhaustive_bottleneck_s"] + 1e-4


def test_human_output_lists_stages_and_baselines(capsys):
    code, out, _ = _run(
        capsys,
        "--model",
        "qwen2-57b-a14b",
        "--cluster",
        "a100-sxm-8",
        "--routing-profile",
        "qwen2-57b-a14b-adak",
        "--pp",
        "4",
    )
    assert code == 0
    assert "time_balanced" in out and "no_pp" in out and "SMIDT vs it" in out
    # the column reads from SMIDT's side: "1.21x faster" on a baseline SMIDT beats
    code, js, _ = _run(
        capsys,
        "--model",
        "qwen2-57b-a14b",
        "--cluster",
        "a100-sxm-8",
        "--routing-profile",
        "qwen2-57b-a14b-adak",
        "--pp",
        "4",
        "--json",
    )
    d = json.loads(js)
    r = d["speedup_vs_uniform"]
    word = f"{r:.2f}x faster" if r >= 1 else f"{1 / r:.2f}x slower"
    row = next(line for line in out.splitlines() if "uniform" in line)
    assert word.split("x")[0] in row and word.split()[-1] in row, (word, row)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            [
                "--model",
                "qwen3-235b-a22b",
                "--cluster",
                "smidt-a40",
                "--routing-profile",
                "qwen2-57b-a14b-adak",
            ],
            "length (28) must equal",
        ),
        (["--model", "qwen3-235b-a22b", "--cluster", "smidt-a40", "--top-p", "1.5"], "top_p (1.5)"),
        (["--model", "qwen3-235b-a22b", "--cluster", "smidt-a40", "--top-p", "0"], "top_p (0.0)"),
        (["--model", "kimi-k2", "--cluster", "findep-b"], "no plan fits"),
        (
            ["--model", "qwen3-235b-a22b", "--cluster", "smidt-a40", "--pp", "3"],
            "pp (3) must divide",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, needle):
    code, out, err = _run(capsys, *args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


def test_no_plan_names_the_memory_needed(capsys):
    _, _, err = _run(capsys, "--model", "kimi-k2", "--cluster", "findep-b")
    need = float(err.split("needs at least ")[1].split(" GiB")[0])
    assert need > 24.0  # findep-b GPUs have 24 GiB


def test_routing_trace_gives_per_layer_mean_k(capsys, tmp_path, small_model):
    """--routing-trace: mean k per MoE layer = valid ids per token, counted directly."""
    import numpy as np

    from moeplan.traces.format import RoutingTrace, save_trace
    from moeplan.traces.topp import softmax, top_p_route

    rng = np.random.default_rng(1)
    n, layers, experts = 64, 4, 128
    ids = np.stack(
        [
            top_p_route(softmax(rng.standard_normal((n, experts)) * (1 + layer)), 0.6, k_max=8)[0]
            for layer in range(layers)
        ],
        axis=1,
    )
    trace = RoutingTrace(
        request_id=np.zeros(n, dtype=np.int64),
        position=np.arange(n),
        token_id=np.arange(n),
        experts=ids.astype(np.int16),
        num_experts=experts,
    )
    path = tmp_path / "trace.npz"
    save_trace(trace, path)
    code, out, _ = _run(
        capsys,
        "--model",
        small_model,
        "--cluster",
        "a100-sxm-8",
        "--routing-trace",
        str(path),
        "--json",
    )
    assert code == 0
    want = [sum(int((ids[t, layer] >= 0).sum()) for t in range(n)) / n for layer in range(layers)]
    assert json.loads(out)["routing"]["mean_k"] == pytest.approx(want)
