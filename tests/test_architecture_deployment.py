"""One deployment type: only :mod:`moeplan.serve.deployment` asks which variant a deployment is.

Every other module branches on a deployment with its own methods or
:meth:`~moeplan.serve.deployment.Deployment.visit`, so a new variant is added in one module
and every caller that forgets it fails loudly (``visit`` without a handler) instead of
taking another variant's branch. The check is on the syntax tree, not a grep: an
``isinstance``/``issubclass`` call, a ``type(x) is/==/!= V`` comparison or a ``case V():``
pattern naming a variant class (or the colocated layout it wraps) fails it.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import moeplan
from moeplan.planners.layout import Layout
from moeplan.serve import deployment as dep
from moeplan.serve.deployment import (
    VARIANTS,
    AFDLayout,
    Colocated,
    DEPGroups,
    Deployment,
    PDLayout,
    Stage,
    StageModule,
    Stages,
)

SRC = Path(moeplan.__file__).parent
HOME = SRC / "serve" / "deployment.py"
#: The classes no module but :data:`HOME` may test for: the variants, their base, the layout.
GUARDED = frozenset({c.__name__ for c in VARIANTS} | {"Deployment", "Layout"})


def _name(node: ast.expr) -> str | None:
    """The class a node names (``V`` or ``mod.V``), else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _classes(node: ast.expr) -> list[str]:
    """Names of the classes in an isinstance's second argument: ``V``, ``(V, W)``, ``V | W``."""
    if isinstance(node, ast.Tuple):
        return [n for e in node.elts for n in _classes(e)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _classes(node.left) + _classes(node.right)
    name = _name(node)
    return [name] if name else []


def _is_type_call(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "type"
        and len(node.args) == 1
    )


def variant_checks(source: str, filename: str = "<src>") -> list[str]:
    """``file:line`` and the class of every variant check in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
        ):
            names = _classes(node.args[1])
        elif isinstance(node, ast.Compare) and all(
            isinstance(op, ast.Is | ast.IsNot | ast.Eq | ast.NotEq) for op in node.ops
        ):
            sides = [node.left, *node.comparators]
            if any(_is_type_call(s) for s in sides):
                names = [n for s in sides if not _is_type_call(s) for n in _classes(s)]
        elif isinstance(node, ast.MatchClass):
            names = [n] if (n := _name(node.cls)) else []
        out += [f"{filename}:{node.lineno} {n}" for n in names if n in GUARDED]
    return out


def test_no_variant_check_outside_the_deployment_module():
    found = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        if path != HOME
        for hit in variant_checks(path.read_text(encoding="utf-8"), str(path.relative_to(SRC)))
    ]
    assert found == [], "ask the deployment (visit or a method), not its class:\n" + "\n".join(
        found
    )


@pytest.mark.parametrize(
    "snippet",
    [
        "isinstance(x, Layout)",
        "isinstance(x, AFDLayout)",
        "isinstance(x, dep.PDLayout)",
        "isinstance(x, (int, Colocated))",
        "isinstance(x, Stages | None)",
        "not isinstance(x, DEPGroups)",
        "issubclass(t, Deployment)",
        "type(x) is Layout",
        "type(x) is not AFDLayout",
        "type(x) == PDLayout",
        "type(x) != Colocated",
        "Stages is type(x)",
        "match x:\n    case AFDLayout(ag=a):\n        pass",
    ],
)
def test_the_check_flags_every_form(snippet):
    assert len(variant_checks(snippet)) == 1, snippet


@pytest.mark.parametrize(
    "snippet",
    [
        "isinstance(x, int)",
        "isinstance(x, (str, bytes))",
        "type(x) is dict",
        "x.visit(colocated=f, afd=g)",
        "match x:\n    case Plan():\n        pass",
        "layout == Layout(attn_tp=2)",  # equality of values is no dispatch
    ],
)
def test_the_check_passes_other_code(snippet):
    assert variant_checks(snippet) == []


def test_the_guarded_set_is_every_variant():
    assert {
        "Colocated", "PDLayout", "AFDLayout", "Stages", "DEPGroups", "Deployment", "Layout"
    } == GUARDED  # fmt: skip


# --- every variant: one label that parses back, and a GPU count that adds up ---------------

POW2 = st.sampled_from([1, 2, 4, 8])


@st.composite
def layouts(draw) -> Layout:
    tp, dp = draw(POW2), draw(st.sampled_from([1, 2, 4]))
    mtp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if (tp * dp) % d == 0]))
    ep = tp * dp // mtp
    pp = draw(st.sampled_from([1, 2, 3]))
    return Layout(
        attn_tp=tp,
        attn_dp=dp,
        moe_tp=mtp,
        moe_ep=ep,
        pp=pp,
        micro_batches=draw(st.sampled_from([0, 1, pp, 2 * pp])),
        dense_tp=draw(
            st.sampled_from([d for d in (0, 1, 2, 4, 8) if d == 0 or (tp * dp) % d == 0])
        ),
        redundant_experts=draw(st.sampled_from([0, 32])) if ep > 1 else 0,
        fused=draw(st.booleans()) if min(mtp, ep) > 1 else False,
        replicas=draw(st.integers(1, 4)),
    )


afds = st.builds(AFDLayout, ag=st.integers(1, 64), eg=st.integers(1, 64))


@st.composite
def pools(draw) -> PDLayout:
    pre = draw(layouts()).instance()
    dec = draw(st.one_of(layouts().map(Layout.instance), afds))
    return PDLayout(prefill=pre, decode=dec, x=draw(st.integers(1, 9)), y=draw(st.integers(1, 9)))


@st.composite
def pipelines(draw) -> Stages:
    pp, r = draw(st.integers(1, 4)), draw(POW2)
    stages, start = [], 0
    for _ in range(pp):
        n = draw(st.integers(1, 3))
        mods = []
        for i in range(n):
            tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if r % d == 0]))
            ep = draw(st.sampled_from([d for d in (1, 2, 4, 8) if (r // tp) % d == 0]))
            kind = draw(st.sampled_from(["attn", "moe", "mlp"]))
            mods.append(StageModule(kind=kind, layer=start + i, tp=tp, ep=ep, dpmoe=r // tp // ep))
        stages.append(Stage(start, start + n, tuple(mods)))
        start += n
    return Stages(world_size=pp * r, stages=tuple(stages))


deployments = st.one_of(
    layouts().map(Colocated),
    pools(),
    afds,
    pipelines(),
    st.builds(DEPGroups, ag=st.integers(1, 64), eg=st.integers(1, 64)),
)


@given(deployments)
def test_label_parses_back_and_gpus_add_up(d: Deployment):
    assert dep.parse(d.label) == d
    assert str(d) == d.label
    parts = d.visit(
        colocated=lambda c: [c.layout.attn_tp * c.layout.attn_dp * c.layout.pp] * c.layout.replicas,
        pd=lambda p: [p.prefill.gpus] * p.x + [p.decode.gpus] * p.y,
        afd=lambda a: [a.ag, a.eg],
        stages=lambda s: [s.world_size // s.pp] * s.pp,
        dep=lambda g: [g.ag, g.eg],
    )
    assert d.gpus == sum(parts)
    assert d.plan_layout().get("world_size", d.gpus) in (d.gpus, d.visit(
        pd=lambda p: p.decode.gpus, default=lambda _: d.gpus,
        colocated=lambda c: c.layout.gpus,
    ))  # fmt: skip


@given(pools())
def test_pd_grammar_is_the_label_grammar(pd: PDLayout):
    """``--pd``'s ``X*LAYOUT:Y*LAYOUT`` with the instances' labels is the same deployment."""
    assert dep.parse(f"{pd.x}*{pd.prefill.label}:{pd.y}*{pd.decode.label}") == pd
    assert dep.pd_from_dict(pd.to_dict()) == pd


@given(st.one_of(layouts().map(Colocated), pipelines(),
                 st.builds(DEPGroups, ag=st.integers(1, 64), eg=st.integers(1, 64))))  # fmt: skip
def test_plan_json_form_reads_back(d: Deployment):
    """A family's ``plan.json`` layout reads back to the deployment (a colocated plan's
    layout is one instance's degrees: replicas, micro-batches, dense TP and the fused
    collectives are written elsewhere in the plan, or not at all)."""
    from moeplan.planners.plan import Plan

    plan = Plan(family=d.plan_family, model="m", cluster="c", layout=d.plan_layout())
    got = dep.from_plan(plan)
    want = d.visit(
        colocated=lambda c: Colocated(
            replace(c.layout, replicas=1, micro_batches=0, dense_tp=0, fused=False)
        ),
        default=lambda x: x,
    )
    assert got == want


def test_visit_without_a_handler_fails_loudly():
    with pytest.raises(TypeError, match="no handler"):
        AFDLayout(ag=2, eg=6).visit(colocated=lambda c: c)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("attn TP2xDP4 / MoE TP1xEP8", Colocated(Layout(attn_tp=2, attn_dp=4, moe_ep=8))),
        ("attn-tp2.attn-dp4.moe-ep8", Colocated(Layout(attn_tp=2, attn_dp=4, moe_ep=8))),
        ("AFD AG4+EG12", AFDLayout(ag=4, eg=12)),
        ("ag4.eg12", AFDLayout(ag=4, eg=12)),
        ("DEP AG2+EG6", DEPGroups(ag=2, eg=6)),
        (
            "3*attn-tp8.moe-tp8:2*ag4.eg12",
            PDLayout(prefill=Layout(attn_tp=8, moe_tp=8), decode=AFDLayout(ag=4, eg=12), x=3, y=2),
        ),
    ],
)
def test_parse_examples(text: str, want: Deployment):
    assert dep.parse(text) == want
