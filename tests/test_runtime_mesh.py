"""Mesh rank arithmetic (pure Python) against brute-force enumeration, and plan validation."""

from __future__ import annotations

import itertools

import pytest

from moeplan.errors import MoeplanError
from moeplan.runtime.mesh import grid_groups, mesh_from_plan


def _plan(family: str, layout: dict, details: dict | None = None) -> dict:
    return {
        "schema": "moeplan.plan/1",
        "family": family,
        "layout": layout,
        "details": details or {},
    }


def _strategy(w: int, pp: int, atp: int, mtp: int) -> dict:
    r = w // pp
    return _plan(
        "strategy",
        {
            "world_size": w,
            "pp": pp,
            "attn": {"tp": atp, "dp": r // atp},
            "moe": {"tp": mtp, "ep": r // mtp},
        },
    )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@pytest.mark.parametrize("w", [1, 2, 3, 4, 6, 8, 12])
def test_strategy_groups_partition_ranks_and_match_coords(w):
    """Every axis's groups partition the world; members share all other coords; TP contiguous."""
    for pp in _divisors(w):
        r = w // pp
        for atp, mtp in itertools.product(_divisors(r), repeat=2):
            mesh = mesh_from_plan(_strategy(w, pp, atp, mtp), w)
            groups = mesh.group_lists()
            for axis in ("pp", "attn_tp", "attn_dp", "moe_tp", "moe_ep"):
                flat = sorted(x for g in groups[axis] for x in g)
                assert flat == list(range(w)), axis
                others = (
                    [a for a in ("pp", "attn_tp", "attn_dp") if a != axis]
                    if axis.startswith(("attn", "pp"))
                    else [a for a in ("pp", "moe_tp", "moe_ep") if a != axis]
                )
                for g in groups[axis]:
                    coords = [mesh.coords(x) for x in g]
                    assert sorted(c[axis] for c in coords) == list(range(len(g)))
                    for a in others:
                        assert len({c[a] for c in coords}) == 1
            for g in groups["attn_tp"] + groups["moe_tp"]:
                assert list(g) == list(range(g[0], g[0] + len(g)))


def test_grid_groups_brute_force():
    """grid_groups equals enumerating row-major coordinates."""
    ranks = list(range(10, 34))
    axes = [("a", 2), ("b", 3), ("c", 4)]
    got = grid_groups(ranks, axes)
    coords = list(itertools.product(range(2), range(3), range(4)))
    for i, (name, _) in enumerate(axes):
        expect = {}
        for idx, c in enumerate(coords):
            key = c[:i] + c[i + 1 :]
            expect.setdefault(key, []).append(ranks[idx])
        assert sorted(got[name]) == sorted(tuple(v) for v in expect.values())


def test_dep_roles():
    mesh = mesh_from_plan(
        _plan(
            "dep", {"world_size": 5, "ag": 2, "eg": 3}, {"ma": 1, "r1": 2, "r2": 2, "order": "AASS"}
        ),
        5,
    )
    assert [mesh.role(r) for r in range(5)] == ["attention"] * 2 + ["expert"] * 3
    assert mesh.coords(3) == {"ag": -1, "eg": 1}


def test_pipeline_module_groups():
    """Per-module (tp, ep, dpmoe) groups inside each stage, laid out [dpmoe, ep, tp]."""
    mod = {"kind": "moe", "layer": 0, "tp": 1, "ep": 2, "dpmoe": 2}
    plan = _plan(
        "pipeline",
        {
            "world_size": 8,
            "pp": 2,
            "stages": [
                {"modules": [{"kind": "attn", "layer": 0, "tp": 4, "ep": 1, "dpmoe": 1}, mod]},
                {
                    "modules": [
                        {"kind": "attn", "layer": 1, "tp": 2, "ep": 1, "dpmoe": 2},
                        {**mod, "layer": 1},
                    ]
                },
            ],
        },
    )
    mesh = mesh_from_plan(plan, 8)
    g = mesh.group_lists()
    assert g["pp"] == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert set(g["tp1.ep2.d2.ep"]) == {(0, 1), (2, 3), (4, 5), (6, 7)}
    assert set(g["tp1.ep2.d2.dpmoe"]) == {(0, 2), (1, 3), (4, 6), (5, 7)}
    assert mesh.module_coords(6, mesh.stages[1][1]) == {"tp": 0, "ep": 0, "dpmoe": 1}


@pytest.mark.parametrize(
    "plan, world, match",
    [
        (_strategy(4, 1, 2, 2), 2, r"world_size \(4\) must equal the launch world size \(2\)"),
        (
            _plan(
                "strategy", {"world_size": 4, "attn": {"tp": 3, "dp": 1}, "moe": {"tp": 2, "ep": 2}}
            ),
            4,
            r"attn tp\*dp",
        ),
        (
            _plan("dep", {"world_size": 4, "ag": 1, "eg": 2}, {"ma": 1, "r1": 1, "r2": 1}),
            4,
            "ag\\+eg",
        ),
        (
            _plan(
                "dep",
                {"world_size": 3, "ag": 1, "eg": 2},
                {"ma": 1, "r1": 1, "r2": 1, "order": "SASA"},
            ),
            3,
            "order",
        ),
        (_plan("bogus", {"world_size": 1}), 1, "family"),
        ({"schema": "x"}, 1, "schema"),
        (
            _plan(
                "pipeline",
                {
                    "world_size": 4,
                    "pp": 2,
                    "stages": [
                        {"modules": [{"kind": "attn", "layer": 0, "tp": 4, "ep": 1, "dpmoe": 1}]},
                        {"modules": [{"kind": "moe", "layer": 0, "tp": 1, "ep": 2, "dpmoe": 1}]},
                    ],
                },
            ),
            4,
            r"tp\*ep\*dpmoe",
        ),
    ],
)
def test_bad_plans_raise_one_line_errors(plan, world, match):
    with pytest.raises(MoeplanError, match=match) as info:
        mesh_from_plan(plan, world)
    assert "\n" not in str(info.value)


def test_strategy_with_pp_becomes_even_pipeline_stages():
    """pp > 1 strategy: layers split evenly (remainder first), modules carry attn/moe layouts."""
    from moeplan.runtime.mesh import strategy_as_pipeline

    mesh = mesh_from_plan(_strategy(8, 2, 2, 1), 8)
    pipe = strategy_as_pipeline(mesh, 5)
    assert [len(st) // 2 for st in pipe.stages] == [3, 2]
    layers = [m.layer for st in pipe.stages for m in st if m.kind == "moe"]
    assert layers == [0, 1, 2, 3, 4]
    attn = pipe.stages[1][0]
    moe = pipe.stages[1][1]
    assert (attn.tp, attn.ep, attn.dpmoe) == (2, 1, 2)
    assert (moe.tp, moe.ep, moe.dpmoe) == (1, 4, 1)
    with pytest.raises(MoeplanError, match="must be >= pp"):
        strategy_as_pipeline(mesh, 1)
