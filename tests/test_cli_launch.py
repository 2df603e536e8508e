"""``serve-sim --launch``: an engine's launch command read as the deployment it starts.

Oracle: the same question asked with moeplan's own flags (the command's layout spelled out)."""

from __future__ import annotations

import json

from cli_run import run_main

PHASE = ["serve-sim", "--cluster", "h100-sxm-8", "--phase", "decode", "--batch-per-gpu", "8",
         "--context", "1024", "--json"]  # fmt: skip


def _json(capsys, args: list[str]) -> dict:
    code, out, err = run_main(capsys, *args)
    assert code == 0, err
    return json.loads(out)


def test_a_launch_command_answers_as_its_layout_spelled_out(capsys):
    cmd = "vllm serve deepseek-ai/DeepSeek-V2-Lite -tp 2 -dp 2 --enable-expert-parallel --host x"
    a = _json(capsys, [*PHASE, "--launch", cmd])
    b = _json(capsys, [*PHASE, "--model", "deepseek-v2-lite", "--engine", "vllm", "--attn-tp", "2",
               "--attn-dp", "2", "--moe-ep", "4"])  # fmt: skip
    launch = a.pop("launch")
    assert a == b
    assert launch["engine"] == "vllm" and launch["not_priced"] == []
    assert [i["flag"] for i in launch["no_effect"]] == ["--host"]


def test_unpriced_flags_are_reported_with_why(capsys):
    cmd = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V2-Lite " \
          "--tp-size 2 --cuda-graph-max-bs 512"  # fmt: skip
    out = _json(capsys, [*PHASE, "--launch", cmd])
    (item,) = out["launch"]["not_priced"]
    assert item["flag"] == "--cuda-graph-max-bs 512" and "CUDA graphs" in item["why"]


def test_conflicts_and_unknown_flags_are_one_line(capsys):
    cmd = "vllm serve deepseek-ai/DeepSeek-V2-Lite -tp 2"
    for extra, needle in (
        (["--attn-tp", "4"], "--attn-tp (4) disagrees"),
        (["--engine", "sglang"], "--engine (sglang) disagrees"),
        (["--pd", "1*attn-tp1:1*attn-tp1"], "drop --pd"),
    ):
        code, _, err = run_main(capsys, *PHASE, "--launch", cmd, *extra)
        assert code == 2 and needle in err, (extra, err)
        assert err.strip().count("\n") == 0
    code, _, err = run_main(capsys, *PHASE, "--launch", cmd + " --frobnicate 3")
    assert code == 2 and "--frobnicate" in err
