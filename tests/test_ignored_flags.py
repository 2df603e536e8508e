"""A flag a question does not read is refused with one line naming it (exit 2, nothing
written), never accepted and ignored: the serving-run flags under ``serve-sim --phase`` and
``plan --concurrency`` (plan ranks deployments on open steady probes, not a closed loop)."""

from __future__ import annotations

import pytest

from cli_run import run_main

PHASE = ("serve-sim", "--model", "deepseek-v2-lite", "--cluster", "h100-sxm-8", "--phase",
         "decode", "--batch-per-gpu", "8", "--context", "1024", "--json")  # fmt: skip


def _one_line(capsys, *args: str) -> str:
    code, out, err = run_main(capsys, *args)
    assert code == 2 and out == "", (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--prefix-hit", "0.5"),
        ("--replicas", "2"),
        ("--isl-dist", "uniform:100:200"),
        ("--rate", "3"),
        ("--concurrency", "4"),
        ("--seed", "5"),
        ("--requests", "50"),
        ("--chunk-tokens", "512"),
        ("--osl", "64"),
    ],
)
def test_serve_sim_phase_refuses_a_serving_run_flag(capsys, flag, value):
    line = _one_line(capsys, *PHASE, flag, value)
    assert line.startswith(f"moeplan: error: {flag} (") and "not to --phase" in line


def test_serve_sim_phase_refuses_trace_out_and_writes_nothing(capsys, tmp_path):
    target = tmp_path / "trace.json"
    line = _one_line(capsys, *PHASE, "--trace-out", str(target))
    assert "--trace-out" in line and "not to --phase" in line
    assert not target.exists()


def test_serve_sim_phase_decode_refuses_isl(capsys):
    line = _one_line(capsys, *PHASE, "--isl", "100")
    assert "--isl (100)" in line and "--context" in line


def test_serve_sim_phase_still_answers_without_run_flags(capsys):
    code, out, err = run_main(capsys, *PHASE)
    assert code == 0, err
    assert '"phase": "decode"' in out


def test_plan_concurrency_is_refused_not_ignored(capsys, tmp_path):
    line = _one_line(capsys, "plan", "--model", "deepseek-v2-lite", "--cluster", "h100-sxm-8",
                     "--concurrency", "4", "--out", str(tmp_path / "o"))  # fmt: skip
    assert "--concurrency (4)" in line and "serve-sim" in line
    assert not (tmp_path / "o").exists()


def test_cost_refuses_an_unknown_kernel_source(capsys):
    line = _one_line(capsys, "cost", "moe", "--cluster", "h100-sxm-8", "--num-tokens", "128",
                     "--hidden-size", "2048", "--inter-size", "1408", "--topk", "6",
                     "--num-experts", "64", "--kernel-source", "bogus", "--json")  # fmt: skip
    assert "--kernel-source ('bogus')" in line and "sglang_fused_moe_triton" in line


def test_strategy_model_path_without_export_is_refused(capsys):
    line = _one_line(capsys, "strategy", "--model", "deepseek-v2-lite", "--cluster",
                     "h100-sxm-8", "--model-path", "/models/x", "--json")  # fmt: skip
    assert line.startswith("moeplan: error: --model-path (") and "--export" in line


@pytest.mark.parametrize(
    "args, names",
    [
        (("--quick",), "--quick needs --device"),
        (("--name", "x", "--quick"), "--quick, --name need --device"),
        (("--kernels", "--device", "cpu"), "--device fit a profile"),
        (("--kernels", "--measured", "a100_sxm", "--out", "p.json"), "--out, --measured fit"),
    ],
)
def test_calibrate_refuses_a_flag_of_the_other_mode(capsys, args, names):
    line = _one_line(capsys, "calibrate", *args, "--json")
    assert line.startswith("moeplan: error: ") and names in line


def test_plan_redundant_experts_is_refused_not_ignored(capsys, tmp_path):
    """The deployment search sets no redundant experts on a layout: N = 8 gave the same plan."""
    line = _one_line(capsys, "plan", "--model", "deepseek-v2-lite", "--cluster", "h100-sxm-8",
                     "--redundant-experts", "8", "--out", str(tmp_path / "o"), "--json")  # fmt: skip
    assert line.startswith("moeplan: error: --redundant-experts (8)") and "serve-sim" in line
    assert not (tmp_path / "o").exists()
