"""Bad input to the wide-EP knobs of ``serve-sim`` runs and ``plan``: one line naming flag,
value and rule; exit 2; nothing written (the ``--phase`` cases are in test_serve_phase)."""

from __future__ import annotations

import pytest

from cli_run import run_main

SIM = ["serve-sim", "--model", "deepseek-v3", "--rate", "1", "--requests", "50"]


def _cli(capsys, args):
    code, out, err = run_main(capsys, *args)
    return code, (out + err).strip()


@pytest.mark.parametrize(
    "args,needle",
    [
        (SIM + ["--cluster", "h100-sxm-8", "--nodes", "9", "--attn-dp", "72", "--moe-ep", "72",
                "--redundant-experts", "30"], "--moe-ep (72) must divide"),
        (SIM + ["--cluster", "h200-sxm-8", "--attn-dp", "8", "--moe-ep", "8", "--mtp", "1",
                "--mtp-accept", "1.5"], "--mtp-accept (1.5) must be in (0, 1]"),
        (SIM + ["--cluster", "h200-sxm-8", "--attn-dp", "8", "--moe-ep", "8", "--mtp", "1",
                "--mtp-accept", "0"], "must be in (0, 1]"),
        (SIM + ["--cluster", "h200-sxm-8", "--attn-dp", "8", "--moe-ep", "8", "--mtp", "1"],
         "--mtp (1) needs --mtp-accept"),
        (SIM + ["--cluster", "a100-sxm-8", "--nodes", "4", "--attn-dp", "32", "--moe-ep", "32",
                "--a2a", "deepep"], "--a2a (deepep) cannot run here"),
        (SIM + ["--cluster", "h200-sxm-8", "--attn-tp", "8", "--moe-tp", "8", "--tbo"],
         "--tbo needs the DeepEP all-to-all"),
        (SIM + ["--cluster", "h200-sxm-8", "--nodes", "2", "--pd",
                "1*attn-dp8.moe-ep8:1*attn-dp8.moe-ep8", "--mtp", "1", "--mtp-accept", "2"],
         "--mtp-accept (2.0) must be in (0, 1]"),
    ],
)  # fmt: skip
def test_serve_sim_bad_knobs(capsys, args, needle):
    code, text = _cli(capsys, args)
    assert code == 2 and needle in text and "\n" not in text, text


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--cluster", "h200-sxm-8", "--mtp", "1", "--mtp-accept", "0"],
         "--mtp-accept (0.0) must be in (0, 1]"),
        (["--cluster", "h200-sxm-8", "--mtp", "1", "--mtp-accept", "1.01"], "(0, 1]"),
        (["--cluster", "h200-sxm-8", "--mtp", "1"], "--mtp (1) needs --mtp-accept"),
        (["--cluster", "a100-sxm-8", "--nodes", "4", "--a2a", "deepep"],
         "--a2a (deepep) cannot run on any layout here: DeepEP needs SM90+"),
        (["--cluster", "a100-sxm-8", "--nodes", "4", "--tbo"], "--tbo cannot run on any layout"),
        (["--cluster", "h100-sxm-8", "--nodes", "9", "--redundant-experts", "7"],
         "--redundant-experts (7) is not applied by moeplan plan"),
    ],
)  # fmt: skip
def test_plan_bad_knobs(capsys, tmp_path, args, needle):
    out = tmp_path / "out"
    code, text = _cli(capsys, ["plan", "--model", "deepseek-v3", *args, "--out", str(out)])
    assert code == 2 and needle in text and "\n" not in text, text
    assert not out.exists()


def test_plan_mtp_needs_a_model_with_an_mtp_layer(capsys, tmp_path):
    code, text = _cli(
        capsys,
        ["plan", "--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8", "--mtp", "1",
         "--mtp-accept", "0.5", "--out", str(tmp_path / "o")],
    )  # fmt: skip
    assert code == 2 and "MTP/NextN" in text and "\n" not in text, text
