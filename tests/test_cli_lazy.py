"""``moeplan <command>`` imports only its command's module: the table that says which module
registers each command word is checked against what every module really registers."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import typer

import moeplan.cli as cli


def _registered_by_module() -> dict[str, str]:
    out: dict[str, str] = {}
    for info in pkgutil.iter_modules(cli.__path__):
        if info.name.startswith("_"):
            continue
        register = getattr(importlib.import_module(f"moeplan.cli.{info.name}"), "register", None)
        if register is None:
            continue
        app = typer.Typer()
        register(app)
        names = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
        for name in names:
            assert name not in out, f"{name} registered by {out.get(name)} and {info.name}"
            out[name] = info.name
    return out


def test_command_table_is_what_the_modules_register():
    assert _registered_by_module() == cli.COMMAND_MODULES


def test_a_command_loads_only_its_module():
    code = (
        "import sys\nfrom moeplan.cli import main\n"
        "try:\n    main(['models', '--json'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('moeplan.cli.')"
        " and not m.split('.')[-1].startswith('_')), file=sys.stderr)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    loaded = eval(p.stderr.strip().splitlines()[-1])  # a printed list of module names
    assert "moeplan.cli.models" in loaded
    assert not {"moeplan.cli.plan", "moeplan.cli.serve", "moeplan.cli.strategy"} & set(loaded)
    assert '"models"' in p.stdout


def test_help_lists_every_command():
    p = subprocess.run(
        [sys.executable, "-m", "moeplan", "--help"], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0
    for word in cli.COMMAND_MODULES:
        assert word in p.stdout, word
