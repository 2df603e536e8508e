"""Command-line front door: ``moeplan <command>``.

Thin by design: each command module in this package parses its flags, calls what computes
the command's answer (:mod:`moeplan.commands`) and prints it (human text, or one JSON object
with ``--json``), writes its files and sets its exit status. Command modules
are discovered automatically: every module here with a ``register(app)`` function adds its
commands, so a new command is a new file.

User mistakes raise :class:`moeplan.errors.MoeplanError`; :func:`main` prints its one line on
stderr and exits with status 2, never a traceback. Top-level handling:

- an ``OSError`` (unwritable ``--out``, a directory given as a file…) is one line, status 2;
- any other exception is a bug in moeplan: one line naming it and pointing at ``--debug``
  (first argument) or ``MOEPLAN_DEBUG=1``, which re-raise it with the traceback; status 1;
- warnings (NumPy ``RuntimeWarning``…) are collected instead of printed: a failing command
  still prints exactly its one error line, a succeeding one a one-line summary;
- SIGTERM raises :class:`moeplan.errors.Terminated`, so atomic writers remove their temp files;
  status 143 (SIGINT: 130);
- a bare ``moeplan`` (or a bare command group) prints its help and exits 0.
"""

from __future__ import annotations

import gc
import os
import signal
import sys


def _aborted_quietly(signum: int, frame: object) -> None:
    """Ctrl-C while the command's modules load (or after it finished): one line, 130."""
    del signum, frame
    try:
        sys.stderr.write("moeplan: aborted\n")
        sys.stderr.flush()
    finally:
        os._exit(130)


def _quiet_sigint() -> object:
    """Make Ctrl-C quiet (:func:`_aborted_quietly`); the previous handler (None: not the
    main thread, left alone)."""
    try:
        return signal.signal(signal.SIGINT, _aborted_quietly)
    except (ValueError, OSError):
        return None


_previous_sigint = _quiet_sigint()  # imports below take seconds (typer, rich, NumPy, ...)

import contextlib  # noqa: E402
import importlib  # noqa: E402
import pkgutil  # noqa: E402
import warnings  # noqa: E402
from typing import Any  # noqa: E402

import typer  # noqa: E402
import typer.main  # noqa: E402

from moeplan.cli._bounds import guard_numbers  # noqa: E402
from moeplan.commands.layout import plain_help  # noqa: E402
from moeplan.errors import MoeplanError, Terminated, show, sigterm_raises  # noqa: E402
from moeplan.textsafe import escape_controls, register_fallback  # noqa: E402

DEBUG_FLAG = "--debug"
DEBUG_ENV = "MOEPLAN_DEBUG"

_app = typer.Typer(
    name="moeplan",
    help="Plan, verify, show, export and run Mixture-of-Experts serving across many GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # Click's help wraps every text whole; rich's table cuts long ones
)

#: command word -> the module of this package whose ``register(app)`` adds it. ``main``
#: imports only the module of the command it runs (the others pull in the planners, the
#: simulator and the kernel tables: most of a bare start-up); help, an unknown word and
#: :data:`app` load them all. ``tests/test_cli_lazy.py`` checks this table against what the
#: modules register.
COMMAND_MODULES = {
    "bench": "bench",
    "calibrate": "calibrate",
    "clusters": "models",
    "cost": "cost",
    "dep": "dep",
    "inspect": "models",
    "models": "models",
    "pipeline": "pipeline",
    "place": "place",
    "plan": "plan",
    "recommend": "recommend",
    "run": "run",
    "serve-sim": "serve",
    "strategy": "strategy",
    "trace": "trace",
    "validate": "bench",
}
_registered: set[str] = set()


def _register(name: str) -> None:
    """Import ``moeplan.cli.<name>`` and add its commands to the app (once)."""
    if name in _registered:
        return
    _registered.add(name)
    register = getattr(importlib.import_module(f"{__name__}.{name}"), "register", None)
    if register is not None:
        register(_app)


def _register_commands(args: list[str] | None = None) -> None:
    """The command modules ``args`` needs: the one its command word names, else every one."""
    word = next((a for a in args or () if not a.startswith("-")), None)
    if word in COMMAND_MODULES:
        _register(COMMAND_MODULES[word])
        return
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            _register(info.name)


def __getattr__(name: str) -> Any:
    """``moeplan.cli.app``: the Typer app with every command registered."""
    if name == "app":
        _register_commands()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if _previous_sigint is not None:  # commands raise KeyboardInterrupt again (main: exit 130)
    signal.signal(signal.SIGINT, _previous_sigint)  # type: ignore[arg-type]


@_app.callback()
def _global(
    debug: bool = typer.Option(False, DEBUG_FLAG, help=f"Show tracebacks (or {DEBUG_ENV}=1)."),
) -> None:
    """Plan, verify, show, export and run Mixture-of-Experts serving across many GPUs."""
    del debug  # handled by main() before parsing


def _command(args: list[str] | None = None) -> Any:
    """The Click command tree of the app with the commands ``args`` needs (every command
    without ``args``), built per call as ``app()`` does, so commands registered later are
    in it; every numeric flag bounded (:mod:`moeplan.cli._bounds`)."""
    _register_commands(args)
    return plain_help(guard_numbers(typer.main.get_command(_app)))


def _no_nul(args: list[str]) -> None:
    """A NUL byte cannot be in a path or a name: refused before any flag is read."""
    for i, a in enumerate(args):
        if "\x00" in a:
            raise MoeplanError(f"argument {i + 1} ({show(a)}) must not contain a NUL byte")


def _fail(message: str, code: int) -> None:
    print(f"moeplan: {escape_controls(message)}", file=sys.stderr)
    sys.exit(code)


def _safe_streams() -> None:
    """stdout/stderr that print in any locale: characters the encoding lacks (an em dash
    under ``LC_ALL=C`` or ``PYTHONIOENCODING=ascii``) get ASCII spellings
    (:func:`moeplan.textsafe.ascii_fallback`) instead of raising ``UnicodeEncodeError``."""
    handler = register_fallback()
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError, AttributeError):  # closed, foreign
                reconfigure(errors=handler)


def _usage_error(err: Exception) -> int | None:
    """Exit code of typer's (vendored click's) usage errors after printing them; else None."""
    fmt = getattr(err, "format_message", None)
    code = getattr(err, "exit_code", None)
    if not (callable(fmt) and isinstance(code, int)):
        return None
    if type(err).__name__ == "NoArgsIsHelpError":  # a bare group: its help, on stdout
        print(fmt())
        return 0
    ctx = getattr(err, "ctx", None)
    where = f" (see 'moeplan {ctx.info_name} --help')" if ctx and ctx.parent else ""
    text = escape_controls(" ".join(str(fmt()).split()))
    print(f"moeplan: error: {text}{where}", file=sys.stderr)
    return code


def _summarise(caught: list[warnings.WarningMessage]) -> None:
    if caught:
        first = escape_controls(" ".join(str(caught[0].message).split())[:160])
        print(
            f"moeplan: warning: {len(caught)} warning(s), first: {first} "
            f"(run 'moeplan {DEBUG_FLAG} ...' to see them)",
            file=sys.stderr,
        )


#: The cyclic collector's thresholds in a moeplan process (Python's are 700, 10, 10). A plan
#: allocates millions of short-lived containers that reference counting frees; with
#: Python's thresholds the collector ran 1,736 times and took 0.85 s of a 13.7 s one-node
#: plan (``--jobs 1``: Qwen3-30B-A3B on 8 H100), with these 4 times and 0.09 s, the peak
#: memory the same (269 and 271 MB): the command makes no cyclic garbage worth collecting
#: sooner.
GC_THRESHOLDS = (100_000, 20, 20)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``moeplan`` console script."""
    _safe_streams()
    if argv is None:  # the console script: a Ctrl-C after the command is quiet too
        gc.set_threshold(*GC_THRESHOLDS)  # the process is moeplan's own (GC_THRESHOLDS)
        try:
            _main(sys.argv[1:])
        finally:
            _quiet_sigint()
            _save_memos()
            # the process ends next: its objects leave the cyclic collector's reach, so the
            # interpreter's shutdown collections do not walk them (0.2 -> 0.07 s after a plan)
            gc.freeze()
    else:
        _main(list(argv))


def _save_memos() -> None:
    """Keep the kernel rows this run priced for the next run (:func:`moeplan.kernel_tables.
    save_memos`), when it priced any; a cache that cannot be written is skipped (it is a
    cache)."""
    tables = sys.modules.get("moeplan.kernel_tables")
    if tables is not None:
        with contextlib.suppress(Exception):
            tables.save_memos()


def _main(args: list[str]) -> None:
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    if args[:1] == [DEBUG_FLAG]:
        debug, args = True, args[1:]
    with warnings.catch_warnings(record=not debug) as caught, sigterm_raises():
        try:
            _no_nul(args)
            rc = _command(args)(args=args, standalone_mode=False)  # returns typer.Exit's code
        except MoeplanError as err:
            _fail(f"error: {err}", 2)
        except (typer.Abort, KeyboardInterrupt):
            _fail("aborted", 130)
        except Terminated as sig:
            _fail(f"terminated (signal {sig.signum})", 128 + sig.signum)
        except typer.Exit as ex:
            sys.exit(ex.exit_code)
        except SystemExit:
            raise
        except Exception as err:
            code = _usage_error(err)
            if code is not None:
                sys.exit(code)
            if debug:
                raise
            if isinstance(err, OSError):
                where = f" ({err.filename})" if err.filename else ""
                _fail(f"error: {err.strerror or type(err).__name__}{where}", 2)
            text = " ".join(str(err).split())[:200]
            _fail(
                f"internal error: {type(err).__name__}: {text} (this is a bug in moeplan; "
                f"run 'moeplan {DEBUG_FLAG} ...' or set {DEBUG_ENV}=1 for the traceback)",
                1,
            )
        if caught:
            _summarise(caught)
    if isinstance(rc, int) and rc:
        sys.exit(rc)


if __name__ == "__main__":
    main()
