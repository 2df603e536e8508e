"""Acceptance: every preset model on every cluster preset it fits gets a winning plan
(:func:`moeplan.planners.rank.plan`, every family, the launch test's call) whose ``plan.json``
runs in the runtime at a reduced scale and matches the single-process reference (fp32, max abs
error <= 1e-5 per unit of the model's routed scaling factor, which multiplies the routed sum).
So does every other family's best plan of the pair (what the ranking and the launch scripts
may export instead), and every winner passes the runtime's validation at full scale.

Reduced scale, the same for every pair:

- the model keeps its expert count, top-k, grouped routing, scoring, shared experts and (for
  pipeline plans) its dense layers; widths shrink (hidden 64, 8 heads, experts 16 wide) and
  only the layers the layout needs are run (:func:`narrow_config`);
- the layout keeps its shape on at most :data:`MAX_WORLD` gloo ranks (:func:`reduce_plan`):
  at most two pipeline stages (the first and second half of the plan's stages), modules
  deduplicated per stage (a stage boundary inside a decoder layer is kept), every degree above 1
  kept above 1 on a one-stage plan (two split axes per module at most: true of every winner);
  on a two-stage plan each module keeps its first split axis (2 ranks per stage). FinDEP keeps
  ``eg`` not dividing the expert count when the plan's does not and 2 or 3 can (uneven experts
  per EG rank, as the planner prices them: AG 1 + EG 3), else AG 2 + EG 2; ``r1``/``r2`` at
  most 2/3.

A winner runs on its own model, once per (model, family, reduced layout, details); another
family's plan shares a run of the same reduced plan (on that run's model) or runs itself. All of them run in one spawn (:func:`moeplan.runtime.runner.run_plans`: a plan of
``w`` ranks on the first ``w`` ranks). The planning is the launch test's (cached), so in a full
run this file adds only the spawn.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moeplan.planners.plan import Plan
from moeplan.planners.rank import PROPOSING_FAMILIES
from moeplan.runtime.config import MoEConfig, from_model_spec
from moeplan.runtime.engines.dep_params import expert_bounds
from moeplan.runtime.mesh import mesh_from_plan
from moeplan.runtime.options import RunOptions
from moeplan.runtime.runner import prepare
from moeplan.specs import ModelSpec, load_model
from test_launchable_presets import planned

TOL = 1e-5  # fp32 against the single-process reference, per unit of routed scaling
MAX_WORLD = 4  # gloo ranks of the reduced plans (one spawn of 4 processes runs them all)
SEQ, TOKENS = 4, 64  # 16 sequences: every DP degree, micro-batch and chunk count gets some
WIDTH = {"hidden_size": 64, "num_heads": 8, "moe_intermediate_size": 16}
DENSE_WIDTH = 32
MAX_STAGES, MAX_R = 2, (2, 3)  # pipeline stages; FinDEP (r1, r2)
KIND = {"attn": "a", "moe": "e", "mlp": "d"}  # table: attention, experts, dense MLP modules


def narrow_config(spec: ModelSpec, layers: int = 2) -> MoEConfig:
    """``spec``'s routing structure and expert count with small widths and ``layers`` layers."""
    full = from_model_spec(spec, "full", num_layers=layers)
    shared = spec.num_shared_experts or (1 if spec.shared_intermediate_size else 0)
    return MoEConfig(
        **{
            **asdict(full),
            **WIDTH,
            "shared_intermediate_size": WIDTH["moe_intermediate_size"] * shared,
            "dense_intermediate_size": DENSE_WIDTH,
        }
    )


def shrink(factors: Sequence[int], size: int) -> tuple[int, ...]:
    """``factors`` (their product ``r``) on ``size <= r`` ranks, ``size`` a power of two unless
    it is ``r``: unchanged when ``size == r``; else the first ``log2(size)`` factors above 1
    stay above 1 (2 each, the first takes the rest), the others become 1."""
    if size == math.prod(factors):
        return tuple(factors)
    big = [i for i, f in enumerate(factors) if f > 1][: size.bit_length() - 1]
    out = [1] * len(factors)
    for i in big:
        out[i] = 2
    if big:
        out[big[0]] = size // 2 ** (len(big) - 1)
    return tuple(out)


def _strategy(p: Plan) -> dict[str, Any]:
    lay = p.layout
    pp = lay.get("pp", 1)
    a, m = (lay["attn"]["tp"], lay["attn"]["dp"]), (lay["moe"]["tp"], lay["moe"]["ep"])
    small_pp = min(pp, MAX_STAGES)
    r = min(p.world_size // pp, MAX_WORLD // small_pp)
    (atp, adp), (mtp, mep) = shrink(a, r), shrink(m, r)
    return {
        "world_size": small_pp * r,
        "attn": {"tp": atp, "dp": adp},
        "moe": {"tp": mtp, "ep": mep},
        "pp": small_pp,
    }


def _dep(p: Plan, experts: int) -> tuple[dict[str, Any], dict[str, Any]]:
    ag, eg = p.layout["ag"], p.layout["eg"]
    # an uneven spread of experts stays uneven: the smallest eg that does not divide them,
    # if one leaves room for an AG rank (kimi-k2's 384 experts divide evenly over 2 and 3)
    uneven = (
        [e for e in range(2, min(eg, MAX_WORLD - 1) + 1) if experts % e] if experts % eg else []
    )
    eg = uneven[0] if uneven else min(eg, 2)
    ag = min(ag, MAX_WORLD - eg)
    d = p.details
    details = {
        "ma": 1,
        "r1": min(d["r1"], MAX_R[0]),
        "r2": min(d["r2"], MAX_R[1]),
        "order": d.get("order", "ASAS"),
        "seq_len": SEQ,
    }
    return {"world_size": ag + eg, "ag": ag, "eg": eg}, details


def _sig(m: dict[str, Any]) -> tuple[Any, ...]:
    return (m["kind"], m["tp"], m["ep"], m["dpmoe"])


def dedupe_stage(mods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One stage's modules with repeated (attn, ffn) layer pairs dropped; a leading ffn (the
    stage starts inside a layer) and a trailing attn (it ends inside one) are kept."""
    head = mods[:1] if mods[0]["kind"] != "attn" else []
    rest = mods[len(head) :]
    tail = rest[-1:] if len(rest) % 2 else []
    body = rest[: len(rest) - len(tail)]
    seen: set[tuple[Any, ...]] = set()
    keep: list[dict[str, Any]] = []
    for a, f in zip(body[::2], body[1::2], strict=True):
        if (_sig(a), _sig(f)) not in seen:
            seen.add((_sig(a), _sig(f)))
            keep += [a, f]
    return head + keep + tail


def _pipeline(p: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    stages = [s["modules"] for s in p.layout["stages"]]
    n = min(len(stages), MAX_STAGES)
    cut = -(-len(stages) // n)  # the first half of the stages (rounded up), then the rest
    merged = [sum(stages[:cut], []), sum(stages[cut:], [])][:n]
    kept = [dedupe_stage(mods) for mods in merged]
    r = min(p.world_size // len(stages), MAX_WORLD // n)
    out, i = [], 0
    for mods in kept:
        small = []
        for m in mods:
            tp, ep, d = shrink(_sig(m)[1:], r)
            small.append({"kind": m["kind"], "layer": i // 2, "tp": tp, "ep": ep, "dpmoe": d})
            i += 1
        out.append({"modules": small})
    details = {
        "microbatches": min(p.details.get("microbatches") or n, 4),
        "async_pp": p.details.get("async_pp", True),
    }
    return {"world_size": n * r, "pp": n, "stages": out}, details


def reduce_plan(p: Plan, spec: ModelSpec) -> tuple[Plan, MoEConfig]:
    """``p`` on a small CPU world and ``spec`` narrowed (see the module docstring)."""
    keep = ("fused", "token_plan", "placement")  # the colocated engines' run-time choices
    details: dict[str, Any] = {k: v for k, v in p.details.items() if k in keep}
    if p.family in ("strategy", "ep"):
        layout = _strategy(p)
    elif p.family == "dep":
        layout, details = _dep(p, spec.num_experts)
    else:
        layout, details = _pipeline(p)
    small = Plan(family=p.family, model=p.model, cluster=p.cluster, layout=layout, details=details)
    return small, narrow_config(spec)


def grid() -> list[dict[str, Any]]:
    """One row per fitting preset pair and family planned: the family's best plan (``winner``
    marks the pair's winner), its reduced plan.json and model config."""
    rows = []
    for mn, cn, result in planned(PROPOSING_FAMILIES):
        for cand in result.candidates:
            text = cand.plan.to_json()
            back = Plan.from_json(text)  # what `moeplan run --plan plan.json` reads
            assert back.to_dict() == json.loads(text)
            small, cfg = reduce_plan(back, load_model(mn))
            rows.append(
                {
                    "model": mn,
                    "cluster": cn,
                    "family": back.family,
                    "winner": cand is result.winner,
                    "layout": back.layout,
                    "small": json.loads(small.to_json()),
                    "cfg": cfg,
                }
            )
    return rows


def _key(row: dict[str, Any]) -> str:
    small = row["small"]
    return json.dumps([small["family"], small["layout"], small["details"]], sort_keys=True)


def run_of(rows: list[dict[str, Any]]) -> list[str]:
    """The run each row's plan is checked by: a winner runs its reduced plan on its own model
    (once per model and reduced plan); another family's plan shares any run of the same reduced
    plan (the first row of a new one runs it)."""
    which = {i: f"{_key(r)} {r['model']}" for i, r in enumerate(rows) if r["winner"]}
    by_plan = {_key(rows[i]): k for i, k in which.items()}
    for i, row in enumerate(rows):
        which.setdefault(i, by_plan.setdefault(_key(row), _key(row)))
    return [which[i] for i in range(len(rows))]


def _runs(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Distinct runs, each with the row whose plan and model it runs."""
    out: dict[str, dict[str, Any]] = {}
    pairs = list(zip(run_of(rows), rows, strict=True))
    for key, row in sorted(pairs, key=lambda kr: not kr[1]["winner"]):  # a winner's own model
        out.setdefault(key, row)
    return out


def _run_all(rank: int, world: int, plans: list[dict[str, Any]], cfgs: list[MoEConfig]) -> Any:
    from moeplan.runtime.runner import run_plans
    from moeplan.runtime.spawn import init_distributed

    init_distributed(rank, world, timeout_s=120.0)
    opts = [RunOptions(config=c, tokens=TOKENS, seq=SEQ, timeout_s=120.0) for c in cfgs]
    return run_plans(rank, world, plans, opts)


def run_grid(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Max abs error of each distinct reduced plan, all run in one spawn."""
    from moeplan.runtime.spawn import spawn_world

    runs = _runs(rows)
    plans = [r["small"] for r in runs.values()]
    cfgs = [r["cfg"] for r in runs.values()]
    for p in plans:  # the reduced plan is a valid runtime plan of the same family
        mesh_from_plan(p)
    world = max(p["layout"]["world_size"] for p in plans)
    reports = spawn_world(_run_all, world, (plans, cfgs), deadline_s=600.0)
    assert all(r["ok"] for r in reports), [r for r in reports if not r["ok"]][:2]
    errs: dict[str, float] = {}
    for i, key in enumerate(runs):
        per_rank = [r["result"][i] for r in reports]
        refused = [r for r in per_rank if r and "error" in r]
        assert not refused, (runs[key]["model"], runs[key]["cluster"], refused[0])
        got = [r["max_abs_err"] for r in per_rank if r and r["max_abs_err"] is not None]
        assert got, key  # some rank produced output and checked it
        errs[key] = max(got)
    return errs


def short(family: str, layout: dict[str, Any]) -> str:
    """A layout in one line: DEP ``AGa+EGe``; colocated degrees; per pipeline stage its
    distinct modules as ``{a|e|d}tp.ep.dpmoe`` (attention, experts, dense MLP)."""
    if family == "dep":
        return f"AG{layout['ag']}+EG{layout['eg']}"
    if family in ("strategy", "ep"):
        a, m = layout["attn"], layout["moe"]
        return f"attn TP{a['tp']}xDP{a['dp']}, moe TP{m['tp']}xEP{m['ep']}, PP{layout['pp']}"
    stages = []
    for stage in layout["stages"]:
        mods = [f"{KIND[m['kind']]}{m['tp']}.{m['ep']}.{m['dpmoe']}" for m in stage["modules"]]
        stages.append("/".join(dict.fromkeys(mods)))
    return f"{layout['world_size']} GPUs PP{layout['pp']} [{' | '.join(stages)}]"


@pytest.mark.slow
def test_every_preset_winner_runs_at_reduced_scale():
    rows = grid()
    runs = _runs(rows)
    errs = run_grid(rows)
    for key, row in runs.items():
        tol = TOL * max(1.0, row["cfg"].routed_scaling_factor)
        assert errs[key] <= tol, (row["model"], row["cluster"], errs[key])
    for key, row in zip(run_of(rows), rows, strict=True):  # every winner ran on its own model
        assert not row["winner"] or runs[key]["model"] == row["model"], key
    assert sum(r["winner"] for r in rows) >= 100  # 9 models x 15 clusters, less misfits
    assert {r["family"] for r in rows} == {"strategy", "pipeline", "dep"}


@pytest.mark.slow
def test_every_preset_winner_is_accepted_at_full_scale():
    """The runtime's own validation of every winner's plan.json with the real model's shapes
    (heads, experts, widths, layers over TP/EP/stages): what `moeplan run --scale full`
    checks before any process starts."""
    for mn, cn, result in planned(PROPOSING_FAMILIES):
        back = Plan.from_json(result.winner.plan.to_json())
        engine, batch = prepare(back, back.world_size, RunOptions(scale="full", tokens=1 << 20))
        assert engine.mesh.family == back.family and batch >= 1, (mn, cn)


@given(
    factors=st.lists(st.sampled_from([1, 1, 2, 4, 8]), min_size=2, max_size=3),
    size=st.sampled_from([1, 2, 4]),
)
def test_shrink_keeps_the_split_axes_it_has_room_for(factors, size):
    """Product ``size``; split axes (factor > 1) stay split in order while 2**count <= size,
    unsplit ones stay 1 (brute force over the factor list)."""
    size = min(size, math.prod(factors))
    out = shrink(factors, size)
    assert math.prod(out) == size and len(out) == len(factors)
    if size == math.prod(factors):
        assert out == tuple(factors)
        return
    split = [i for i, f in enumerate(factors) if f > 1]
    room = max(k for k in range(len(split) + 1) if 2**k <= size)
    assert [i for i, f in enumerate(out) if f > 1] == split[:room]


def _mod(kind, layer, tp=1, ep=1, d=1):
    return {"kind": kind, "layer": layer, "tp": tp, "ep": ep, "dpmoe": d}


def test_dedupe_stage_keeps_boundaries_and_distinct_layer_pairs():
    """A stage entered mid-layer (leading moe) and left mid-layer (trailing attn) keeps both;
    repeated (attn, ffn) pairs go, the first of each distinct pair stays, in order."""
    mods = [_mod("moe", 3, ep=4), _mod("attn", 4, d=4), _mod("moe", 4, ep=4)]
    mods += [_mod("attn", 5, d=4), _mod("moe", 5, ep=4), _mod("attn", 6, d=4)]
    mods += [_mod("mlp", 6, tp=4), _mod("attn", 7, d=4), _mod("moe", 7, ep=4)]
    mods += [_mod("attn", 8, d=4)]
    got = dedupe_stage(mods)
    assert [(m["kind"], m["layer"]) for m in got] == [
        ("moe", 3),
        ("attn", 4),
        ("moe", 4),
        ("attn", 6),
        ("mlp", 6),
        ("attn", 8),
    ]


@pytest.mark.parametrize(("experts", "eg"), [(64, 5), (160, 3), (128, 5), (8, 8), (256, 4)])
def test_dep_runs_uneven_experts_per_eg_rank(experts, eg):
    """FinDEP's AG 3 + EG 5 for deepseek-v2-lite's 64 experts was refused (`num_experts (64)
    must be divisible by eg (5)`). The EG ranks now hold contiguous ranges covering every
    expert once, the fullest one ceil(E/eg) experts as the planner prices it."""
    bounds = expert_bounds(experts, eg)
    held = [list(range(bounds[k], bounds[k + 1])) for k in range(eg)]
    assert sum(held, []) == list(range(experts))
    assert max(map(len, held)) == -(-experts // eg) and min(map(len, held)) == experts // eg
    plan = Plan(
        family="dep",
        model="deepseek-v2-lite",
        cluster="findep-a",
        layout={"world_size": 3 + eg, "ag": 3, "eg": eg},
        details={"ma": 1, "r1": 2, "r2": 4, "order": "ASAS", "seq_len": 2048},
    )
    cfg = MoEConfig(num_experts=experts, top_k=2)
    engine, batch = prepare(
        json.loads(plan.to_json()), 3 + eg, RunOptions(config=cfg, tokens=1 << 14)
    )
    assert batch == 3 * 2 * 1 and engine.mesh.eg == eg


if __name__ == "__main__":  # the table: .venv/bin/python tests/test_runtime_preset_grid.py
    ROWS = grid()
    ERRS = run_grid(ROWS)
    for key, row in zip(run_of(ROWS), ROWS, strict=True):
        if row["winner"]:
            print(
                f"| {row['model']} | {row['cluster']} | {row['family']} | "
                f"{short(row['family'], row['layout'])} | "
                f"{short(row['family'], row['small']['layout'])} | "
                f"ran, max abs err {ERRS[key]:.1e} |"
            )
