"""One vocabulary in flags and errors; outputs written as a unit."""

from __future__ import annotations

import json
import os

import pytest

from moeplan.cli import main
from moeplan.io import OutputSet

DEP = [
    "dep",
    "--model",
    "deepseek-v2-lite",
    "--cluster",
    "findep-c",
    "--ag",
    "1",
    "--eg",
    "1",
    "--isl",
    "128",
    "--layers",
    "2",
]


def _err(capsys, args: list[str]) -> tuple[int, str]:
    try:
        code = main(args) or 0
    except SystemExit as stop:  # main() exits with the command's code
        code = stop.code if isinstance(stop.code, int) else 1
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["inspect", "deepseek-v2-lite", "--gpus", "0"], "--gpus (0) must be >= 1"),
        (["inspect", "deepseek-v2-lite", "--gpus", "4"], "--gpus needs --cluster"),
        (
            ["strategy", "--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8", "--seed", "-1"],
            "--seed (-1) must be >= 0",
        ),
        (["plan", "--seed", str(10**23)], "--seed"),
        (["plan", "--engine", "trt"], "--engine ('trt') must be one of sglang, vllm, trtllm"),
        (["plan", "--rate", "1", "--concurrency", "4"], "--concurrency (4) is not modelled"),
        (
            ["dep", "--model", "deepseek-v2-lite", "--cluster", "findep-c", "--seq", "128"],
            "No such option",
        ),
    ],
)
def test_bad_flags_are_one_line_exit_2(capsys, args, needle):
    code, err = _err(capsys, args)
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_place_rejects_negative_step_tokens(capsys, tmp_path):
    trace = tmp_path / "t.npz"
    code, _ = _err(
        capsys,
        ["trace", "synth", "--model", "deepseek-v2-lite", "--requests", "8", "--out", str(trace)],
    )
    assert code == 0
    capsys.readouterr()
    code, err = _err(
        capsys,
        [
            "place",
            "--trace",
            str(trace),
            "--model",
            "deepseek-v2-lite",
            "--ep",
            "8",
            "--step-tokens",
            "-1",
        ],
    )
    assert code == 2 and "--step-tokens (-1) must be >= 1" in err


def test_out_is_a_folder_replaced_as_a_unit_and_foreign_files_are_kept(capsys, tmp_path):
    out = tmp_path / "dep"
    assert _err(capsys, [*DEP, "--out", str(out)])[0] == 0
    first = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert set(first) == {"plan.json", "timeline.json", "gantt.html"}
    assert json.loads((out / "plan.json").read_text())["family"] == "dep"
    assert _err(capsys, [*DEP, "--out", str(out)])[0] == 0  # an earlier moeplan set is replaced
    assert {p.name for p in out.iterdir()} == set(first)
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    code, err = _err(capsys, [*DEP, "--out", str(out)])
    assert code == 2 and "notes.txt" in err and (out / "notes.txt").read_text() == "mine"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_output_set_publishes_nothing_when_a_member_fails(tmp_path):
    out = tmp_path / "o"
    with OutputSet(out, known={"a.json", "b.json"}) as s:
        s.write("a.json", "1")
        s.write("b.json", "2")
    with pytest.raises(RuntimeError), OutputSet(out, known={"a.json", "b.json"}) as s:
        s.write("a.json", "new")
        raise RuntimeError("b could not be made")
    assert (out / "a.json").read_text() == "1" and (out / "b.json").read_text() == "2"
    assert sorted(os.listdir(tmp_path)) == ["o"]
    assert oct((out / "a.json").stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_run_plan_takes_the_out_folder(capsys, tmp_path):
    """``run --plan DIR`` reads DIR/plan.json; its flags are --isl and --timeline."""
    out = tmp_path / "dep"
    assert _err(capsys, [*DEP, "--out", str(out)])[0] == 0
    code, err = _err(capsys, ["run", "--plan", str(out), "--isl", "0"])
    assert code == 2 and "--isl" in err
