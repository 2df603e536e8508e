"""Launch scripts cannot run what an input carries: hostile model paths, labels and reasons
(newlines, ``$(...)``, backticks, quotes, ``${VAR}``, ESC, CR) rendered into every kind of
script pass ``bash -n``, and running them with stand-in engine executables (``python``,
``python3``, ``vllm``, ``ray``, ``sglang`` recording their argv) creates no file and hands each
engine the hostile value byte for byte as one argument; a NUL byte is refused."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from argv_recorder import recorder
from moeplan.errors import MoeplanError
from moeplan.export import constraints as cons
from moeplan.export.launcher import HERE, render_launcher, render_refusal
from moeplan.export.plan_export import PREFILL_UNIT, ExportContext, Option, engine_export
from moeplan.planners.layout import Layout
from moeplan.specs import load_cluster, load_model

PWN = "PWNED"
HOSTILE = [
    f"x\ntouch {PWN}",
    f"$(touch {PWN})",
    f"`touch {PWN}`",
    f"a'; touch {PWN}; echo '",
    f'a"; touch {PWN}; echo "',
    f"${{HOME:-$(touch {PWN})}}",
    f"${{HERE}}$(touch {PWN})",
    f"x\r\ntouch {PWN}\n#",
    f"\x1b]0;title\x07\nt\\\nouch {PWN}",
    f"x\u2028touch {PWN}",
    f"-- --model-path; touch {PWN} #",
]
RECORDER = recorder()
ENGINES = ("python", "python3", "vllm", "ray", "sglang")


def expanded(value: str, work: Path) -> str:
    """What the shell hands on: the named variables (launcher.SHELL_VARS) expanded, no more."""
    return value.replace("${HERE}", str(work)).replace("${MASTER_ADDR}", "10.0.0.1")


def run(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> list[list[str]]:
    """``bash -n`` then run ``text`` with recording engines; the recorded argv lists."""
    work = tmp_path / "w"
    bin_dir = work / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for exe in ENGINES:
        (bin_dir / exe).write_text(RECORDER)
        (bin_dir / exe).chmod(0o755)
    script = work / "go.sh"
    script.write_text(text)
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    log = work / "argv.log"
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ARGV_LOG": str(log), "MASTER_ADDR": "10.0.0.1"}
    subprocess.run(
        ["bash", str(script)],
        cwd=work,
        env={**base, **(env or {})},
        capture_output=True,
        timeout=30,
    )
    assert not list(work.rglob(PWN + "*")) and not list(tmp_path.glob(PWN + "*"))
    cmds, cur = [], []
    for item in log.read_bytes().split(b"\0")[:-1] if log.exists() else []:
        if item == b"<end>":
            cmds.append(cur)
            cur = []
        else:
            cur.append(item.decode())
    return cmds


@pytest.mark.parametrize("value", HOSTILE)
def test_one_node_launcher_quotes_arguments_and_comments(tmp_path, value):
    text = render_launcher(
        ["python", "-m", "sglang.launch_server", "--model-path", value],
        comments=[f"model path: {value}", value],
        preamble=[HERE],
    )
    assert all(line.startswith("#") for line in text.splitlines()[2:4])
    cmds = run(tmp_path, text)
    want = expanded(value, tmp_path / "w")
    assert cmds == [["python", "-m", "sglang.launch_server", "--model-path", want]]


@pytest.mark.parametrize("value", HOSTILE)
def test_refusal_quotes_everything(tmp_path, value):
    refusal = render_refusal("vllm", [value, value], value)
    assert run(tmp_path / "r", refusal) == []


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_engine_export_of_a_hostile_model_path(tmp_path, engine):
    """A model path reaches the server byte for byte, ``${HERE}`` in it included."""
    m, c = load_model("mixtral-8x7b"), load_cluster("h100-sxm-8")
    result = SimpleNamespace(model=m, cluster=c)
    opt = Option(
        strategy=Layout(attn_tp=8, attn_dp=1, moe_tp=8, moe_ep=1),
        label="tp8",
        family="strategy",
        per_gpu=100.0,
        unit=PREFILL_UNIT,
    )
    for i, value in enumerate(HOSTILE):
        ctx = ExportContext(
            model_path=value,
            target=cons.Target.of(m, c),
            planned_layers=32,
            full_layers=32,
            notes=(value,),
            pricing=value,
        )
        ex = engine_export(engine, result, ctx, [opt])
        cmds = run(tmp_path / str(i), ex.text)
        if not ex.node_args:  # refused by the engine's rules (e.g. a path that is a flag)
            assert cmds == [] and "cannot launch" in ex.text
            continue
        assert len(cmds) == 1 and value in cmds[0]  # the user's path: nothing in it expanded


def test_nul_byte_is_refused():
    with pytest.raises(MoeplanError, match="NUL byte"):
        render_launcher(["python", "a\x00b"])
    from moeplan.export.plan_export import model_path_for

    with pytest.raises(MoeplanError, match="--model-path .* NUL byte"):
        model_path_for("mixtral-8x7b", "a\x00b")


def test_cli_script_of_a_hostile_model_path(tmp_path):
    """Through ``moeplan strategy --export``: the written script runs nothing it carries."""
    from moeplan.cli import main

    value = f"x\ntouch {PWN} $(touch {PWN}2)`touch {PWN}3`'\""
    out = tmp_path / "S"
    try:
        main(
            [
                "strategy",
                "--model",
                "mixtral-8x7b",
                "--cluster",
                "h100-sxm-8",
                "--export",
                "sglang",
                "--model-path",
                value,
                "--out",
                str(out),
            ]
        )
    except SystemExit as ex:
        assert ex.code in (0, None)
    cmds = run(tmp_path, (out / "sglang.sh").read_text())
    assert len(cmds) == 1 and value in cmds[0]
