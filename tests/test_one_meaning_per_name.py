"""One meaning per name: a public UPPER_CASE module-level name of ``src/moeplan`` is bound to
one value across the package, so a reader who meets ``FAMILIES`` in one module knows what it
holds in every other.

The check reads the source (AST): a name assigned at module level in two modules with
different value text fails, unless it is in :data:`ONE_MEANING` (the same meaning whose
value is each module's own). A re-export (``from x import NAME``) binds no new value and is
not an assignment, so it never counts.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import moeplan

SRC = Path(moeplan.__file__).parent

#: names bound in several modules with one meaning but each module's own value -> the meaning
ONE_MEANING = {
    "SCHEMA": "the schema id of the file format the module reads and writes",
    "OUTPUTS": "the files the command of that CLI module writes",
    "MAX_REQUESTS": "the bound on the request count the command of that CLI module accepts",
    "MAX_SEED": "the bound on the seed the command of that CLI module accepts",
    "MEMO_KEYS": "the size at which the module's own memo is cleared",
    "BF16_BYTES": "bytes per bf16 value (an int where the sum is integer bytes)",
    # one attribute of the per-engine interface, one value per engine module
    "VERSION": "the engine release a backend module is pinned to (moeplan.backends.<engine>)",
    "KV_CACHE_DTYPE_FLAG": "an engine's spelling of each KV dtype (moeplan.backends.<engine>)",
    "PD_PROXY_NOTE": "a launch writer's note on its P/D router (moeplan.export.writers)",
}


def upper_bindings(root: Path) -> dict[str, dict[str, str]]:
    """``{name: {module path: value text}}`` for each public UPPER_CASE module-level name."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            for t in targets:
                if isinstance(t, ast.Name) and t.id.isupper() and not t.id.startswith("_"):
                    out[t.id][str(path.relative_to(root))] = ast.unparse(value)
    return out


def collisions(bindings: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    return {n: where for n, where in bindings.items() if len(set(where.values())) > 1}


def test_each_upper_case_name_has_one_value():
    clash = {n: w for n, w in collisions(upper_bindings(SRC)).items() if n not in ONE_MEANING}
    assert not clash, (
        "one name, several values (rename one, or say why in ONE_MEANING): "
        + "; ".join(f"{n}: {w}" for n, w in sorted(clash.items()))
    )


def test_allow_list_names_a_real_duplicate():
    stale = set(ONE_MEANING) - set(collisions(upper_bindings(SRC)))
    assert not stale, f"ONE_MEANING lists names bound to one value only: {sorted(stale)}"


def test_the_check_sees_a_collision(tmp_path):
    (tmp_path / "a.py").write_text('FAMILIES = ("x",)\nSAME = 1\n_PRIVATE = 1\n')
    (tmp_path / "b.py").write_text(
        'FAMILIES: tuple = ("y",)\nSAME = 1\n_PRIVATE = 2\nfrom a import SAME\n'
    )
    assert collisions(upper_bindings(tmp_path)) == {
        "FAMILIES": {"a.py": "('x',)", "b.py": "('y',)"}
    }
