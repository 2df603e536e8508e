"""Command-line front door: ``moeplan <command>``.

Thin by design: each command module in this package parses its flags, builds specs, calls one
planner function and prints (human text, or one JSON object with ``--json``). Command modules
are discovered automatically: every module here with a ``register(app)`` function adds its
commands, so a new command is a new file.

User mistakes raise :class:`moeplan.errors.MoeplanError`; :func:`main` prints its one line on
stderr and exits with status 2, never a traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from moeplan.errors import MoeplanError

app = typer.Typer(
    name="moeplan",
    help="Plan, verify, show, export and run Mixture-of-Experts serving across many GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_commands() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


_register_commands()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``moeplan`` console script."""
    try:
        rc = app(args=argv, standalone_mode=False)  # returns typer.Exit's code here
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except MoeplanError as err:
        print(f"moeplan: error: {err}", file=sys.stderr)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        print("moeplan: aborted", file=sys.stderr)
        sys.exit(130)
    except typer.Exit as ex:
        sys.exit(ex.exit_code)
    except SystemExit:
        raise
    except Exception as err:  # usage errors (typer's vendored click) arrive here
        fmt = getattr(err, "format_message", None)
        code = getattr(err, "exit_code", None)
        if callable(fmt) and isinstance(code, int):
            ctx = getattr(err, "ctx", None)
            where = f" (see 'moeplan {ctx.info_name} --help')" if ctx and ctx.parent else ""
            print(f"moeplan: error: {' '.join(str(fmt()).split())}{where}", file=sys.stderr)
            sys.exit(code)
        raise


if __name__ == "__main__":
    main()
