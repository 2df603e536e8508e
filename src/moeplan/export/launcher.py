"""Launch scripts (``.sh``) for exported engine arguments, written atomically.

One script per engine. A multi-node plan gets one script for every node: it reads
``NODE_RANK`` (0 .. nodes-1) from the environment and runs that node's exact command (a
``case`` over the ranks), so every rank's arguments are in the file and can be checked.
``HERE`` is set to the script's own folder, so files written next to it (the
``expert_location.json``) are found wherever the script is run from. A strategy the engine
cannot express gets a script that explains why and exits 1.

Nothing from an input runs: every argument is single-quoted by :func:`shlex.quote` except the
shell variables the exporters name on purpose (:data:`SHELL_VARS`, each kept as ``"${NAME}"``),
an argument holding a NUL byte (which no command line can carry) is refused, and every comment
line has its control characters escaped (:func:`moeplan.textsafe.escape_controls`), so a
newline in a model path or a folder name cannot end the comment.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Sequence

from moeplan.errors import require, show
from moeplan.textsafe import escape_controls

HERE = 'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"'
#: The shell variables an exported argument may name (expanded when the script runs): the
#: script's folder, the multi-node rendezvous address and rank, the RDMA devices of a P/D
#: server's KV transfer, the PD instances' nodes 0 and the launch folder's node addresses.
SHELL_VARS = re.compile(
    r"\$\{(HERE|MASTER_ADDR|NODE_RANK|MOEPLAN_IB_DEVICE|(?:PREFILL|DECODE|NODE)_[0-9]+_ADDR)\}"
)
_PLAIN = re.compile(r"[\w@%+=:,./-]*", re.ASCII)  # shlex's characters that need no quotes


def _quote(a: str, literal: bool = False) -> str:
    """``a`` as one shell word: literal text single-quoted, :data:`SHELL_VARS` expanded
    unless ``literal`` (a user's string, e.g. a model path: nothing in it is expanded)."""
    require("\x00" not in a, f"launcher argument ({show(a)}) must not contain a NUL byte")
    parts = (
        [a] if literal else SHELL_VARS.split(a)
    )  # literal, var name, literal, var name, ..., literal
    if len(parts) == 1:
        return shlex.quote(a)
    literals = parts[0::2]
    if all(_PLAIN.fullmatch(t) for t in literals):  # e.g. "${HERE}/expert_location.json"
        return '"' + "".join(t if i % 2 == 0 else "${" + t + "}" for i, t in enumerate(parts)) + '"'
    return "".join(
        (shlex.quote(t) if t else "") if i % 2 == 0 else '"${' + t + '}"'
        for i, t in enumerate(parts)
    )


def comment(text: str) -> str:
    """One inert ``# ...`` line of ``text`` (control characters escaped)."""
    return "# " + escape_controls(str(text))


def render_command(args: Sequence[str], indent: str = "", literals: Collection[str] = ()) -> str:
    """One command, a flag and its value per line; ``${VAR}`` left for the shell except in
    an argument equal to one of ``literals`` (the user's strings, quoted whole)."""
    require(len(args) > 0, "launcher args (empty) must name a command")
    quoted = [_quote(a, a in literals) for a in args]
    body, cur = [], quoted[0]
    for a in quoted[1:]:
        if a.startswith("--"):
            body.append(cur)
            cur = a
        else:
            cur += " " + a
    body.append(cur)
    return indent + f" \\\n{indent}  ".join(body)


def _head(comments: Sequence[str], preamble: Sequence[str]) -> list[str]:
    return ["#!/usr/bin/env bash", "set -euo pipefail", *[comment(c) for c in comments], *preamble]


def render_launcher(
    args: Sequence[str], comments: Sequence[str] = (), preamble: Sequence[str] = ()
) -> str:
    """Bash text running ``args`` (one node)."""
    return "\n".join([*_head(comments, preamble), render_command(args)]) + "\n"


def render_refusal(engine: str, comments: Sequence[str], reason: str) -> str:
    """A script that says why ``engine`` cannot launch this plan and exits 1."""
    msg = shlex.quote(f"moeplan: {engine} cannot launch this plan: {reason}")
    return "\n".join([*_head(comments, ()), f"echo {msg} >&2", "exit 1"]) + "\n"
