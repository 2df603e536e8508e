"""Run ``moeplan`` in this process, as the tests that call :func:`moeplan.cli.main` do."""

from __future__ import annotations

from moeplan.cli import main


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``moeplan ARGS`` run through :func:`main`."""
    code = 0
    try:
        main(list(args))
    except SystemExit as ex:
        code = int(ex.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err
