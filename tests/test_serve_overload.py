"""``serve-sim --rate`` beyond what the deployment serves: the answer says it is overloaded
and its throughput is what the run served, which a saturated closed loop on the same
deployment bounds, never the offered load (rate x output tokens per request)."""

from __future__ import annotations

import json

from cli_run import run_main

#: one H100 running Qwen3-30B-A3B (one GPU, no parallelism): its largest rate meeting the
#: default SLOs is about 9 req/s, so 1000 req/s is overloaded a hundredfold
ONE_GPU = ("--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8", "--attn-tp", "1", "--moe-tp", "1")
#: the served rate is measured between the window's first and last completions and the
#: closed loop over its whole run (ramp and drain included): a few percent apart at most
TOLERANCE = 0.03


def _metrics(capsys, *args):
    code, out, err = run_main(capsys, "serve-sim", *ONE_GPU, *args, "--json")
    assert code == 0, out + err
    return json.loads(out)["metrics"]


def test_overloaded_rate_reports_served_throughput(capsys):
    over = _metrics(capsys, "--rate", "1000")
    # 512 clients with no think time keep the engine saturated (the KV pool caps the batch)
    closed = _metrics(capsys, "--concurrency", "512", "--requests", "4000")
    assert over["overloaded"] is True
    offered = 1000 * 256  # req/s x the default 256 output tokens per request
    assert over["output_tokens_per_s"] < offered / 10
    ceiling = closed["output_tokens_per_s"] * (1 + TOLERANCE)
    assert over["output_tokens_per_s"] <= ceiling
    assert over["output_tokens_per_s"] >= closed["output_tokens_per_s"] * (1 - TOLERANCE)
    assert over["output_tokens_per_s_per_gpu"] <= ceiling
    assert over["duration_s"] > 10  # the window's completions, not requests / offered rate


def test_stable_rate_is_not_overloaded(capsys):
    m = _metrics(capsys, "--rate", "4")
    assert m["overloaded"] is False
    assert abs(m["output_tokens_per_s"] - 4 * 256) / (4 * 256) < 0.05  # serves what arrives


def test_overloaded_text_says_so(capsys):
    code, out, err = run_main(capsys, "serve-sim", *ONE_GPU, "--rate", "1000")
    assert code == 0, out + err
    text = " ".join((out + err).split())
    assert "Overloaded: 1000 req/s offered (256,000 output tokens/s)" in text


def test_overloaded_pd_pair_reports_served_throughput(capsys):
    """A P/D pair at 2000 req/s (its capacity is a few req/s): flagged, and what it served."""
    code, out, err = run_main(
        capsys, "serve-sim", "--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8",
        "--isl", "1024", "--osl", "32", "--requests", "60", "--cost-engine", "none",
        "--pd", "1*attn-tp2.moe-tp2:1*attn-tp4.moe-tp4", "--rate", "2000", "--json",
    )  # fmt: skip
    assert code == 0, out + err
    m = json.loads(out)["metrics"]
    assert m["overloaded"] is True
    assert m["output_tokens_per_s"] < 2000 * 32 / 10  # not the offered load
