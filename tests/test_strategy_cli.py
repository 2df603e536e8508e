"""``moeplan strategy`` CLI: JSON contract, files written, one-line errors with exit 2."""

from __future__ import annotations

import json

import pytest

from moeplan.cli import main


def run(args: list[str], capsys) -> tuple[int, str, str]:
    code = 0
    try:
        main(["strategy", *args])
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_contract_and_ranking(capsys):
    code, out, _ = run(
        [
            "--model",
            "qwen3-235b-a22b",
            "--cluster",
            "mixserve-910b",
            "--json",
            "--top",
            "50",
            "--export",
            "sglang",
        ],
        capsys,
    )
    assert code == 0
    obj = json.loads(out)
    assert {"strategies", "baselines", "search_ms", "export", "pareto", "plan"} <= set(obj)
    rows = obj["strategies"]
    for r in rows:
        assert {
            "attn",
            "moe",
            "pp",
            "ttft_s",
            "itl_s",
            "throughput_tokens_per_s",
            "mem_bytes_per_gpu",
            "fused",
        } <= set(r)
        assert r["attn"]["tp"] * r["attn"]["dp"] * r["pp"] == 32
        assert r["mem_bytes_per_gpu"] <= 64 * 1024**3
    thr = [r["throughput_tokens_per_s"] for r in rows]
    assert thr == sorted(thr, reverse=True)
    assert set(obj["baselines"]) == {"vllm-tp-pp", "vllm-dp-ep", "tutel-tp-ep", "deepseek-v3"}
    assert obj["export"]["engine"] == "sglang" and obj["export"]["args"]


def test_slo_filter_and_files(tmp_path, capsys):
    html, plan = tmp_path / "s" / "pareto.html", tmp_path / "s" / "plan.json"
    code, out, _ = run(
        [
            "--model",
            "qwen3-30b-a3b",
            "--cluster",
            "mixserve-h20",
            "--json",
            "--batch",
            "16",
            "--ttft-slo",
            "400",
            "--itl-slo",
            "50",
            "--engine",
            "none",  # SLOs set for the calibrated GEMM/NCCL model
            "--out",
            str(tmp_path / "s"),
            "--rank-by",
            "ttft",
        ],
        capsys,
    )
    assert code == 0
    obj = json.loads(out)
    assert all(r["ttft_s"] <= 0.4 and r["itl_s"] <= 0.05 for r in obj["strategies"])
    ttft = [r["ttft_s"] for r in obj["strategies"]]
    assert ttft == sorted(ttft)
    assert "plotly" in html.read_text()
    assert json.loads(plan.read_text())["family"] == "strategy"


def test_human_output_mentions_baselines(capsys):
    code, out, _ = run(
        ["--model", "qwen3-30b-a3b", "--cluster", "mixserve-h20", "--top", "3"], capsys
    )
    assert code == 0 and "vllm-dp-ep" in out and "Top strategies" in out


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model", "deepseek-v3", "--cluster", "findep-b"], "GiB per GPU"),
        (["--model", "deepseek-v3", "--cluster", "nope"], "cluster"),
        (["--model", "qwen3-30b-a3b", "--cluster", "mixserve-h20", "--batch", "0"], "batch"),
        (["--model", "qwen3-30b-a3b", "--cluster", "mixserve-h20", "--export", "trt"], "export"),
        (["--model", "/no/such/config.json", "--cluster", "mixserve-h20"], "model"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle, capsys):
    code, out, err = run(args, capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_verify_replays_fused_rounds_on_simulator(tmp_path, capsys):
    gantt = tmp_path / "s" / "gantt.html"
    code, out, _ = run(
        [
            "--model",
            "qwen3-235b-a22b",
            "--cluster",
            "mixserve-910b",
            "--json",
            "--top",
            "1",
            "--verify",
            "--out",
            str(tmp_path / "s"),
        ],
        capsys,
    )
    assert code == 0
    v = json.loads(out)["verify"]
    assert v["strategy"].endswith("fused")
    for key in ("prefill_fused", "prefill_sequential", "decode_fused", "decode_sequential"):
        assert v[key]["gap"] < 1e-9
    assert v["prefill_fused"]["simulated_s"] < v["prefill_sequential"]["simulated_s"]
    assert "plotly" in gantt.read_text()


def test_one_node_writes_no_fused_gantt(tmp_path, capsys):
    """One node has no fused RS-Combine/AG-Dispatch layout: the set has no gantt.html."""
    code, _, _ = run(
        ["--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8", "--out", str(tmp_path / "s")],
        capsys,
    )
    assert code == 0 and (tmp_path / "s" / "plan.json").exists()
    assert not (tmp_path / "s" / "gantt.html").exists()
