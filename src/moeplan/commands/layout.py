"""How human output is laid out: the width it fits and the help text Click prints."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import Any

#: The widest human output is printed: tables and prose fit 80 columns on a terminal or a pipe
#: alike (a narrower terminal narrows them; ``COLUMNS`` wins everywhere, as for rich and
#: coreutils). Rich alone would use a wide terminal's full width, and 80 only when piped.
MAX_WIDTH = 80


def output_width() -> int:
    """The width human output is laid out to: ``COLUMNS`` when set, else the terminal's width
    capped at :data:`MAX_WIDTH`, else (a file or a pipe) :data:`MAX_WIDTH`."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        with contextlib.suppress(OSError, ValueError):
            return min(os.get_terminal_size(sys.stdout.fileno()).columns, MAX_WIDTH)
    return MAX_WIDTH


def _for_stdout(text: str) -> str:
    """``text`` in characters stdout's encoding has: Click writes help to a UTF-8 stream of
    its own where stdout is ASCII, so the spellings of
    :func:`moeplan.textsafe.ascii_fallback` are put in first."""
    from moeplan.textsafe import register_fallback

    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    return text.encode(encoding, errors=register_fallback()).decode(encoding)


def plain_help(command: Any) -> Any:
    """``command`` (a Click command or group) with the reStructuredText literal marks (double
    backticks) of its and its subcommands' docstrings and option help removed: ``--help``
    shows the words alone, in characters stdout can print."""
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    get_help = command.get_help
    command.get_help = lambda ctx: _for_stdout(get_help(ctx))
    for attr in ("help", "short_help"):
        if getattr(command, attr, None):
            setattr(command, attr, getattr(command, attr).replace("``", ""))
    if command.help and not command.short_help:  # Click would cut it at 45 characters
        first = " ".join(command.help.split("\n\n", 1)[0].split())
        command.short_help = re.split(r"(?<=[.!?])\s", first, maxsplit=1)[0]
    for param in getattr(command, "params", ()):
        if getattr(param, "help", None):
            param.help = param.help.replace("``", "")
    return command
