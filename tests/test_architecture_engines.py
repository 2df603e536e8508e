"""Architecture rule, by AST: no module outside ``moeplan/backends/`` switches on an engine's name.

What an engine decides lives in its backend (:mod:`moeplan.backends`); everyone else asks the
backend object. The walk parses every ``.py`` under ``src/moeplan`` except the backends package
and fails on any of these with a string constant naming an engine (:data:`ENGINE_NAMES`):

- a comparison with it (``==``, ``!=``, ``in``, ``not in``, ``is``), on either side;
- a membership test against (or comparison with) a literal tuple, list or set holding it;
- a dict literal keyed by it (a dispatch table by engine name);
- a subscript by it (``table["vllm"]``);
- a ``match`` case on it.

A name in a docstring, help text, default argument or call argument is not a switch and passes.
The self-test below feeds each forbidden form to the checker, so the walk cannot pass vacuously.
"""

from __future__ import annotations

import ast
from pathlib import Path

import moeplan
import moeplan.backends

SRC = Path(moeplan.__file__).parent
BACKENDS = SRC / "backends"
#: every engine name a backend has, and the names a switch could still spell
ENGINE_NAMES = frozenset({"sglang", "vllm", "trtllm", *moeplan.backends.BACKENDS})


def _is_engine(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in ENGINE_NAMES


def _holds_engine(node: ast.AST) -> bool:
    """A literal tuple/list/set with an engine name among its elements."""
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(map(_is_engine, node.elts))


def _pattern_names(pattern: ast.pattern) -> bool:
    return any(
        isinstance(p, ast.MatchValue) and _is_engine(p.value)
        for p in ast.walk(pattern)
        if isinstance(p, ast.MatchValue)
    )


def engine_switches(source: str, filename: str = "<snippet>") -> list[str]:
    """``file:line what`` of every engine-name switch in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source, filename)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(_is_engine, operands)):
                out.append(f"{filename}:{line} compares with an engine name")
            elif any(map(_holds_engine, operands)):
                out.append(f"{filename}:{line} tests membership in engine names")
        elif isinstance(node, ast.Dict) and any(k is not None and _is_engine(k) for k in node.keys):
            out.append(f"{filename}:{line} keys a dict by engine name")
        elif isinstance(node, ast.Subscript) and _is_engine(node.slice):
            out.append(f"{filename}:{line} subscripts by an engine name")
        elif isinstance(node, ast.match_case) and _pattern_names(node.pattern):
            out.append(f"{filename}:{line} matches on an engine name")
    return out


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if BACKENDS not in p.parents)


def test_no_engine_name_switch_outside_the_backends():
    """Every engine decision is a backend's: no comparison, membership test, dispatch dict,
    subscript or match case on an engine name anywhere else in ``src/moeplan``."""
    files = _sources()
    assert len(files) > 100  # the walk sees the tree
    bad = [hit for p in files for hit in engine_switches(p.read_text(encoding="utf-8"), str(p))]
    assert bad == [], "ask moeplan.backends.backend(name) instead:\n" + "\n".join(bad)


FORBIDDEN = {
    "eq": 'if engine == "sglang":\n    pass\n',
    "ne_reversed": 'ok = "vllm" != engine\n',
    "in_string": 'ok = "trtllm" in engines\n',
    "not_in_tuple": 'ok = engine not in ("sglang", "vllm")\n',
    "in_list": 'ok = engine in ["vllm"]\n',
    "in_set": 'ok = engine in {"trtllm", "x"}\n',
    "eq_list": 'ok = args[:1] == ["vllm"]\n',
    "ternary": 'v = 1 if self.engine == "vllm" else 0\n',
    "dict_key": 'ENV = {"sglang": "A", "vllm": "B"}\n',
    "subscript": 'v = table["vllm"]\n',
    "match": 'match engine:\n    case "sglang":\n        pass\n',
    "match_or": 'match engine:\n    case "x" | "vllm":\n        pass\n',
}


def test_checker_flags_every_forbidden_form():
    """The oracle for the walk above: each forbidden form is caught, once."""
    for name, src in FORBIDDEN.items():
        assert len(engine_switches(src)) == 1, name


def test_checker_allows_names_that_do_not_switch():
    """Docstrings, help text, defaults, call arguments, choices from the registry and other
    strings compared pass."""
    src = (
        '"""Runs on sglang or vllm."""\n'
        'def f(engine: str = "sglang", help="sglang, vllm or trtllm"):\n'
        "    b = backend(engine)\n"
        '    g("vllm")\n'
        "    if engine in simulated() or engine == NO_ENGINE or args[0] == PROGRAM:\n"
        "        return {b.name: 1}\n"
        '    return engine == "none" or role in ("prefill", "decode")\n'
    )
    assert engine_switches(src) == []


def test_the_checker_skips_only_the_backends_package():
    """The backends hold the engine names; every other file of the tree is read."""
    files = _sources()
    assert not any(BACKENDS in p.parents for p in files)
    assert SRC / "export" / "launch_servers.py" in files
    assert (BACKENDS / "sglang.py").is_file()
