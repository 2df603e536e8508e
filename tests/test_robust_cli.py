"""The CLI's top level: exactly one stderr line for every failure, help for a bare
``moeplan``, ``--debug`` for tracebacks, warnings that never add lines, SIGTERM cleanup.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import typer

import moeplan.cli as cli
from moeplan.cli import main


def _run(capsys, argv):
    try:
        main(argv)
        code = 0
    except SystemExit as ex:
        code = int(ex.code or 0)
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


def test_case10_bare_moeplan_prints_help_only(capsys):
    code, out, err = _run(capsys, [])
    assert code == 0 and err == []
    assert "Commands" in out and "--debug" in out


def test_bare_command_group_prints_help_only(capsys):
    code, out, err = _run(capsys, ["trace"])
    assert code == 0 and err == [] and "synth" in out


@pytest.fixture
def broken_command():
    """A command with a genuine bug, registered for one test."""

    def boom() -> None:
        raise ZeroDivisionError("division by zero in a planner")

    def warns() -> None:
        with np.errstate(all="warn"):
            np.log(np.zeros(1))
        raise cli.MoeplanError("x (1) must be 2")

    def warns_ok() -> None:
        warnings.warn("overflow encountered", RuntimeWarning, stacklevel=1)

    names = {"zz-boom": boom, "zz-warns": warns, "zz-warns-ok": warns_ok}
    for name, fn in names.items():
        cli.app.command(name)(fn)
    yield
    cli.app.registered_commands[:] = [c for c in cli.app.registered_commands if c.name not in names]


def test_internal_bug_is_one_line_with_debug_pointer(capsys, monkeypatch, broken_command):
    monkeypatch.delenv("MOEPLAN_DEBUG", raising=False)
    code, _, err = _run(capsys, ["zz-boom"])
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("moeplan: internal error: ZeroDivisionError")
    assert "--debug" in err[0] and "MOEPLAN_DEBUG=1" in err[0]
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "zz-boom"])
    monkeypatch.setenv("MOEPLAN_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["zz-boom"])


def test_case10_runtime_warnings_do_not_add_lines(capsys, monkeypatch, broken_command):
    monkeypatch.delenv("MOEPLAN_DEBUG", raising=False)
    code, _, err = _run(capsys, ["zz-warns"])
    assert code == 2 and err == ["moeplan: error: x (1) must be 2"]
    code, _, err = _run(capsys, ["zz-warns-ok"])
    assert code == 0 and len(err) == 1 and err[0].startswith("moeplan: warning: 1 warning")


def test_oserror_is_one_line_exit_2(capsys, tmp_path, monkeypatch):
    def denied() -> None:
        open(tmp_path / "missing" / "x")  # noqa: SIM115 - raises FileNotFoundError

    cli.app.command("zz-oserror")(denied)
    try:
        code, _, err = _run(capsys, ["zz-oserror"])
    finally:
        cli.app.registered_commands[:] = [
            c for c in cli.app.registered_commands if c.name != "zz-oserror"
        ]
    assert code == 2 and len(err) == 1 and "No such file or directory" in err[0], err


def test_typer_exit_and_usage_errors_unchanged(capsys):
    code, _, err = _run(capsys, ["inspect", "--no-such-flag"])
    assert code == 2 and len(err) == 1 and "--no-such-flag" in err[0]
    assert isinstance(typer.Exit(3).exit_code, int)


@pytest.mark.timeout(120)
def test_case3_trace_synth_sigterm_leaves_no_hidden_temp_file(tmp_path):
    """SIGTERM during ``trace synth`` (streamed Parquet): temp file removed, exit 143."""
    out = tmp_path / "t.parquet"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "moeplan",
            "trace",
            "synth",
            "--out",
            str(out),
            "--requests",
            "200000",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    end = time.monotonic() + 90
    while time.monotonic() < end and not [p for p in os.listdir(tmp_path) if p.startswith(".")]:
        time.sleep(0.05)
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")], "temp file never appeared"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines() == ["moeplan: terminated (signal 15)"]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--ep", "0"], "--ep (0) must be >= 1"),
        (["--ep", "-1"], "--ep (-1) must be >= 1"),
        (["--seed", "-1"], "--seed (-1) must be >= 0"),
    ],
)
def test_case9_trace_stats_flags_are_one_line(tmp_path, capsys, flags, needle):
    from moeplan.traces.format import save_trace
    from moeplan.traces.synthetic import uniform_trace

    path = tmp_path / "t.npz"
    save_trace(uniform_trace(num_requests=4, length=4, num_layers=2, num_experts=8, top_k=2), path)
    code, _, err = _run(capsys, ["trace", "stats", str(path), *flags])
    assert code == 2 and err == [f"moeplan: error: {needle}"], err
