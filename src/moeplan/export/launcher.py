"""Write a launch script (``.sh``) for exported engine arguments, atomically.

The script is written to a temporary file in the target directory and renamed into place,
so a failure never leaves a partial launcher behind (DESIGN.md, "Bad input and failure").
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from moeplan.errors import require
from moeplan.io import write_atomic


def render_launcher(args: Sequence[str], comments: Sequence[str] = ()) -> str:
    """Bash text running ``args``; ``${VAR}`` placeholders are left for the shell to expand."""
    require(len(args) > 0, "launcher args (empty) must name a command")
    lines = ["#!/usr/bin/env bash", "set -euo pipefail"]
    lines += [f"# {c}" for c in comments]
    quoted = [f'"{a}"' if "${" in a and '"' not in a else shlex.quote(a) for a in args]
    body, cur = [], quoted[0]
    for a in quoted[1:]:
        if a.startswith("--"):
            body.append(cur)
            cur = a
        else:
            cur += " " + a
    body.append(cur)
    lines.append(" \\\n  ".join(body))
    return "\n".join(lines) + "\n"


def write_launcher(path: str | Path, args: Sequence[str], comments: Sequence[str] = ()) -> Path:
    """Write an executable launcher atomically; returns its path."""
    target = Path(path)
    text = render_launcher(args, comments)
    directory = target.parent if str(target.parent) else Path(".")
    require(directory.is_dir(), f"launcher path ({target}) must be in an existing directory")
    return write_atomic(target, text, executable=True)
