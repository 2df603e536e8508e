"""Architecture rule: the planning layers never import torch."""

from __future__ import annotations

import subprocess
import sys

PLANNING = ["moeplan.specs", "moeplan.cost", "moeplan.sim", "moeplan.planners"]


def test_planning_layers_leave_torch_out():
    code = (
        "import importlib, pkgutil, sys\n"
        f"for name in {PLANNING!r}:\n"
        "    try:\n        pkg = importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n        continue\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, name + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
