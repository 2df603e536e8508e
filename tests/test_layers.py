"""Architecture rule (DESIGN.md "Layers"): nothing above runtime/profiling imports torch.

Every top-level package and module of ``moeplan`` is classified here, so a new one must be
placed on one side of the line. Each torch-free one is imported with all of its submodules in
a fresh interpreter, which must end with ``torch`` (and triton) absent from ``sys.modules``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import moeplan

#: Planning layers: pure functions over specs and a cost model (also I/O-free, see
#: tests/test_architecture.py).
PLANNING = ["specs", "backends", "cost", "sim", "planners", "serve", "search"]
#: Edges that read and write files or talk to the user; torch stays a lazy, in-function import.
EDGES = ["traces", "report", "export", "cli", "commands", "measured", "kernel_tables",
         "kernel_store", "io", "infersim_tables", "io_recover", "kernel_codec", "textsafe",
         "units", "errors"]  # fmt: skip
#: The only places allowed to import torch (or triton) at import time.
TORCH = ["runtime", "profiling"]
#: Not a library module: ``python -m moeplan`` runs the CLI.
ENTRY = ["__main__"]

_SRC = Path(moeplan.__file__).parent

_PROBE = """
import importlib, pkgutil, sys
name = sys.argv[1]
mod = importlib.import_module(name)
paths = getattr(mod, "__path__", []) if name != "moeplan" else []  # the root: __init__ only
for m in pkgutil.walk_packages(paths, name + "."):
    importlib.import_module(m.name)
    if "torch" in sys.modules or "triton" in sys.modules:
        print("pulled in by", m.name)
        break
print(sorted(k for k in ("torch", "triton") if k in sys.modules))
"""


def _top_level() -> set[str]:
    names = {p.stem for p in _SRC.glob("*.py") if p.stem != "__init__"}
    return names | {p.name for p in _SRC.iterdir() if (p / "__init__.py").is_file()}


def test_every_package_is_classified():
    """A new package or top-level module must say whether it may import torch."""
    known = set(PLANNING + EDGES + TORCH + ENTRY)
    assert _top_level() - known == set(), "classify it in tests/test_layers.py"
    assert known - _top_level() == set(), "a listed package no longer exists"


@pytest.mark.parametrize("name", [*PLANNING, *EDGES, ""])
def test_torch_free_layers_leave_torch_out(name):
    """Importing the package and every submodule leaves torch and triton unloaded
    ("" is the root ``moeplan/__init__`` alone)."""
    target = f"moeplan.{name}" if name else "moeplan"
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, target], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
