"""The family registry (``moeplan.planners.families``): one record per deployment family.

Two rules, read from the source: (1) no module switches on a family's name (``family ==
"pd"``, ``c.family in ("pd", "afd")``) outside the registry — a family's behaviour lives in its
record or in a layer's table keyed by family name; (2) every layer's table covers exactly the
families whose record asks for it, so adding a family fails here until every layer knows it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import moeplan
from moeplan.planners import families as fam

SRC = Path(moeplan.__file__).parent
REGISTRY_FILE = SRC / "planners" / "families.py"
NAMES = frozenset(fam.FAMILY)
#: Switches known and owned elsewhere: {(file, comparison): reason}. An entry that no longer
#: matches fails, so the list only shrinks.
KNOWN_SWITCHES: dict[tuple[str, str], str] = {}


def _family_literals(node: ast.AST) -> bool:
    """A family name as a string, or a tuple/list/set of them."""
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return bool(node.elts) and all(_family_literals(e) for e in node.elts)
    return False


def family_switches(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every comparison of a family-named expression with family names."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = any("fam" in ast.unparse(s).lower() for s in sides if not _family_literals(s))
        if named and any(_family_literals(s) for s in sides):
            out.append((node.lineno, ast.unparse(node)))
    return out


def test_switch_scanner_on_examples():
    """The scanner finds the switches it is meant to find, and nothing else."""
    src = "\n".join(
        [
            'if family == "pd": pass',
            'if c.entry.family not in ("pd", "afd"): pass',
            'x = "dep" != fam',
            'y = [c for c in cs if c.family == "strategy"]',
            'if key != "strategy": pass',  # a dict key, not a family
            "if family == other.family: pass",  # two families compared
            'if kind == "afd": pass',  # a layout kind, not named family
            'TABLE = {"pd": 1, "afd": 2}',
        ]
    )
    assert [line for line, _ in family_switches(src)] == [1, 2, 3, 4]


def test_no_family_switch_outside_the_registry():
    found, known = [], set()
    for path in sorted(SRC.rglob("*.py")):
        if path == REGISTRY_FILE:
            continue
        rel = path.relative_to(SRC).as_posix()
        for line, t in family_switches(path.read_text(encoding="utf-8")):
            if (rel, t) in KNOWN_SWITCHES:
                known.add((rel, t))
            else:
                found.append(f"{rel}:{line}: {t}")
    assert not found, "switch on a family name outside planners/families.py:\n" + "\n".join(found)
    assert known == set(KNOWN_SWITCHES), (
        f"gone, drop from KNOWN_SWITCHES: {set(KNOWN_SWITCHES) - known}"
    )


def test_registry_is_consistent():
    assert len(fam.REGISTRY) == len(fam.FAMILY)  # names unique
    for f in fam.REGISTRY:
        assert fam.FAMILY[f.plan_family].plan_family == f.plan_family, f.name
        if f.needs:
            assert f.needs in fam.PROPOSING_FAMILIES, f.name
    assert set(fam.TITLES) == NAMES
    assert fam.PLAN_FAMILIES == ("strategy", "ep", "pipeline", "dep")
    assert fam.PROPOSING_FAMILIES == ("strategy", "pipeline", "dep")
    assert fam.POOLED_FAMILIES == ("pd", "afd")


def test_unknown_family_is_one_line():
    with pytest.raises(moeplan.errors.MoeplanError, match=r"family \('xyz'\) must be one of"):
        fam.family("xyz")


def test_every_layer_table_covers_its_families():
    """Each layer registers its code per family; the record says which families need it."""
    from moeplan.commands.serve_plan import PLAN_LAYOUTS
    from moeplan.planners.rank import ADAPTERS
    from moeplan.runtime.mesh import MESH_BUILDERS
    from moeplan.search.disagg.rank import NEEDS, POOL_PLANS
    from moeplan.search.ranking.family_layouts import ENTRIES
    from moeplan.serve.deployment import FROM_PLAN

    assert set(ADAPTERS) == set(fam.PROPOSING_FAMILIES)
    assert set(ENTRIES) == set(fam.INSTANCE_SERVED) == set(PLAN_LAYOUTS)
    assert set(POOL_PLANS) == set(NEEDS) == set(fam.POOLED_FAMILIES)
    assert set(MESH_BUILDERS) == set(fam.PLAN_FAMILIES) == set(FROM_PLAN)
    from moeplan.export.plan_export import ANALYTIC_OPTIONS

    assert set(ANALYTIC_OPTIONS) == set(fam.PROPOSING_FAMILIES)


def test_report_colours_every_ranked_family():
    """The report draws every family the analytic or the serving ranking can hold."""
    from moeplan.report.figures import COLORS, FAMILY_BASELINES
    from moeplan.report.sections import FAMILY_SECTIONS

    assert set(COLORS) == set(fam.PROPOSING_FAMILIES) | set(fam.POOLED_FAMILIES)
    assert set(FAMILY_BASELINES) == set(FAMILY_SECTIONS) == set(fam.PROPOSING_FAMILIES)
    assert all(fam.FAMILY[f].report_section for f in FAMILY_SECTIONS)


def test_runtime_engines_cover_plan_families():
    pytest.importorskip("torch")
    from moeplan.runtime.engines import FAMILY_ENGINES

    assert set(FAMILY_ENGINES) == set(fam.PLAN_FAMILIES)


@pytest.mark.parametrize(("family", "unit"), [("pd", "per deployment (its pools together)"),
                                              ("afd", "per deployment (its pools together)"),
                                              ("strategy", "per instance")])  # fmt: skip
def test_capacity_sentence_names_what_its_rate_feeds(family, unit):
    """A pooled deployment is fed one arrival stream for all its pools, a colocated winner one
    per replica: the capacity sentence says which (the record's rate is that stream's)."""
    from types import SimpleNamespace as NS

    from moeplan.search.ranking.views import _capacity_sentences

    label = "L"
    rec = {"layout": label, "ci95_rps_per_instance": (1.0, 3.0), "rate_rps_per_instance": 2.0,
           "ci95_half_width_rel": 0.5, "limited_by": "TTFT"}  # fmt: skip
    entry = NS(family=family, layout=NS(label=label), gpus=8)
    ranking = NS(search={"winner_capacity": rec}, winner=NS(entry=entry, metrics=None),
                 rate_given=False, certificate_sentence="")  # fmt: skip
    out = _capacity_sentences(ranking, NS(cluster=NS(num_gpus=8)))  # type: ignore[arg-type]
    assert out == [f"Capacity: 2.00 req/s {unit} (95 % interval 1.00..3.00, +/-50.0%)."]
