"""The ``plan.json`` schema, checked field by field before any reader uses a plan.

A plan file is input like any other: it may be hand-edited or corrupt. :func:`check_plan`
checks a decoded ``plan.json`` object against its own schema (``moeplan.plan/1``, docs/API.md)
— types (an integer is a JSON integer, not a boolean, fraction, string or list), ranges
(degrees and counts at least 1 and bounded, decoder layers non-negative) and sums (the
layout's GPUs equal ``world_size``, a pipeline's stages cover consecutive modules, the served
instance's GPUs times its replicas equal the GPUs it reports) — and :func:`check_plan_model`
against the model it is used with (every decoder layer exactly once, none past the model).
Every failure is one :class:`~moeplan.errors.MoeplanError` line naming the field, its value
and the rule. :meth:`moeplan.planners.plan.Plan.from_dict` runs :func:`check_plan`, so every
reader of a plan file (``serve-sim --plan``, ``serve-sim --pd PLAN``, ``run``) gets it first.

Pure: no I/O, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moeplan.errors import MoeplanError, require, show
from moeplan.planners.families import FAMILY
from moeplan.specs import ModelSpec
from moeplan.specs.cluster import MAX_GPUS_PER_NODE, MAX_NODES
from moeplan.specs.limits import MAX_LAYERS  # a model has at most this many layers

#: a parallel degree or GPU count past every GPU a cluster spec can hold is corrupt
#: (specs/cluster.py bounds the nodes and GPUs per node)
MAX_GPUS = MAX_NODES * MAX_GPUS_PER_NODE
#: a micro-batch carries at least one request and ``serve-sim`` simulates at most 200,000
#: requests (commands/serve_inputs.py ``MAX_REQUESTS``); ``run``'s global batch is at most
#: 2^24 tokens (commands/run.py ``MAX_TOKENS``): 2^24 bounds both
MAX_MICRO_BATCHES = 1 << 24
#: redundant experts per MoE layer: EPLB adds a few per EP rank; more than the GPUs' worth of
#: 2^10 each is corrupt
MAX_REDUNDANT = MAX_GPUS << 10
MODULE_KINDS = ("attn", "moe", "mlp")  # what the pipeline planner writes (planners/pipeline)
KNOB_TYPES: dict[str, tuple[type, ...]] = {  # serve/iteration/instance_knobs.py InstanceKnobs
    "a2a": (str,),
    "tbo": (bool,),
    "mtp": (int,),
    "mtp_accept": (int, float, type(None)),
    "kv_dtype": (str,),
}
#: MTP draft tokens per step: the instance knobs' bound (serve/iteration/instance_knobs.py
#: ``MAX_MTP``; the planners layer cannot import serve, a test holds the two equal)
MAX_MTP = 8


def _int(obj: Mapping[str, Any], key: str, where: str, lo: int, hi: int) -> int:
    """``obj[key]``: a JSON integer in ``lo..hi`` (no bool, float, string or list)."""
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise MoeplanError(f"{where}.{key} ({show(v)}) must be an integer in {lo}..{hi}")
    return v


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MoeplanError(f"{where} ({show(value)}) must be a JSON object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise MoeplanError(f"{where} ({show(value)}) must be a non-empty list")
    return value


def check_plan(data: Mapping[str, Any]) -> None:
    """Check a decoded ``plan.json`` object (envelope already read) against the schema."""
    kind = FAMILY[data["family"]].layout  # the envelope's family is checked already
    layout = _obj(data.get("layout"), "plan.layout")
    world = _int(layout, "world_size", "plan.layout", 1, MAX_GPUS)
    details = data.get("details")
    details = details if isinstance(details, Mapping) else {}
    if kind == "colocated":
        _check_colocated(layout, world)
    elif kind == "stages":
        _check_stages(layout, world)
        if "microbatches" in details:
            _int(details, "microbatches", "plan.details", 1, MAX_MICRO_BATCHES)
    elif kind == "groups":
        ag = _int(layout, "ag", "plan.layout", 1, MAX_GPUS)
        eg = _int(layout, "eg", "plan.layout", 1, MAX_GPUS)
        require(
            ag + eg == world,
            f"plan.layout ag+eg ({ag}+{eg}) must equal plan.layout.world_size ({world})",
        )
    pools = details.get("disaggregation")
    if pools is not None:
        _check_pools(_obj(pools, "plan.details.disaggregation"))
    predicted = data.get("predicted")
    serving = predicted.get("serving") if isinstance(predicted, Mapping) else None
    if isinstance(serving, Mapping):
        _check_serving(serving)


def _check_colocated(layout: Mapping[str, Any], world: int) -> None:
    where = "plan.layout"
    attn, moe = _obj(layout.get("attn"), f"{where}.attn"), _obj(layout.get("moe"), f"{where}.moe")
    a_tp, a_dp = (_int(attn, k, f"{where}.attn", 1, MAX_GPUS) for k in ("tp", "dp"))
    m_tp, m_ep = (_int(moe, k, f"{where}.moe", 1, MAX_GPUS) for k in ("tp", "ep"))
    pp = _int(layout, "pp", where, 1, MAX_GPUS) if "pp" in layout else 1
    reps = _int(layout, "replicas", where, 1, MAX_GPUS) if "replicas" in layout else 1
    if "redundant_experts" in layout:
        _int(layout, "redundant_experts", where, 0, MAX_REDUNDANT)
    require(
        a_tp * a_dp * pp * reps == world,
        f"{where}.world_size ({world}) must equal attn tp*dp x pp x replicas "
        f"({a_tp}*{a_dp} x {pp} x {reps})",
    )
    require(
        m_tp * m_ep == a_tp * a_dp,
        f"{where}.moe tp*ep ({m_tp}*{m_ep}) must equal attn tp*dp ({a_tp}*{a_dp})",
    )


def _check_stages(layout: Mapping[str, Any], world: int) -> None:
    where = "plan.layout"
    pp = _int(layout, "pp", where, 1, MAX_GPUS)
    stages = _list(layout.get("stages"), f"{where}.stages")
    require(len(stages) == pp, f"{where}.stages ({len(stages)} stages) must number pp ({pp})")
    require(world % pp == 0, f"{where}.world_size ({world}) must be a multiple of pp ({pp})")
    per_stage = world // pp
    first = _obj(_list(_obj(stages[0], f"{where}.stages[0]").get("modules"),
                       f"{where}.stages[0].modules")[0], f"{where}.stages[0].modules[0]")  # fmt: skip
    cut = [first.get(k) for k in ("tp", "ep", "dpmoe")]
    if all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_GPUS for v in cut):
        require(
            world == pp * cut[0] * cut[1] * cut[2],
            f"{where}.world_size ({world}) must equal pp x stages[0].modules[0] tp*ep*dpmoe "
            f"({pp} x {cut[0]}*{cut[1]}*{cut[2]})",
        )
    expect_start = 0
    for j, st in enumerate(stages):
        w = f"{where}.stages[{j}]"
        st = _obj(st, w)
        mods = _list(st.get("modules"), f"{w}.modules")
        if "start_module" in st or "end_module" in st:
            start = _int(st, "start_module", w, 0, 2 * MAX_LAYERS)
            end = _int(st, "end_module", w, 0, 2 * MAX_LAYERS)
            require(
                start == expect_start,
                f"{w}.start_module ({start}) must be {expect_start}: stages cover consecutive "
                "modules from 0",
            )
            require(
                end - start == len(mods),
                f"{w}.end_module ({end}) must be start_module + its {len(mods)} modules "
                f"({start + len(mods)})",
            )
        expect_start += len(mods)
        for i, m in enumerate(mods):
            mw = f"{w}.modules[{i}]"
            m = _obj(m, mw)
            kind = m.get("kind")
            require(
                kind in MODULE_KINDS,
                f"{mw}.kind ({show(kind)}) must be one of {', '.join(MODULE_KINDS)}",
            )
            _int(m, "layer", mw, 0, MAX_LAYERS - 1)
            tp, ep, dp = (_int(m, k, mw, 1, MAX_GPUS) for k in ("tp", "ep", "dpmoe"))
            require(
                tp * ep * dp == per_stage,
                f"{mw} tp*ep*dpmoe ({tp}*{ep}*{dp}) must equal world_size/pp ({per_stage})",
            )


def _check_instance(inst: Mapping[str, Any], where: str) -> int:
    """A flat instance form (``Layout.to_dict``, or an AFD ``{kind, ag, eg}``): its GPUs."""
    if inst.get("kind") == "afd":
        ag, eg = _int(inst, "ag", where, 1, MAX_GPUS), _int(inst, "eg", where, 1, MAX_GPUS)
        gpus = ag + eg
    else:
        a_tp, a_dp, m_tp, m_ep, pp = (
            _int(inst, k, where, 1, MAX_GPUS) if k in inst else 1
            for k in ("attn_tp", "attn_dp", "moe_tp", "moe_ep", "pp")
        )
        if "micro_batches" in inst:
            _int(inst, "micro_batches", where, 0, MAX_MICRO_BATCHES)
        if "dense_tp" in inst:
            _int(inst, "dense_tp", where, 0, MAX_GPUS)
        if "redundant_experts" in inst:
            _int(inst, "redundant_experts", where, 0, MAX_REDUNDANT)
        if "fused" in inst and not isinstance(inst["fused"], bool):
            raise MoeplanError(f"{where}.fused ({show(inst['fused'])}) must be true or false")
        require(
            m_tp * m_ep == a_tp * a_dp,
            f"{where} moe_tp*moe_ep ({m_tp}*{m_ep}) must equal attn_tp*attn_dp ({a_tp}*{a_dp})",
        )
        gpus = a_tp * a_dp * pp
    if "gpus" in inst:
        got = _int(inst, "gpus", where, 1, MAX_GPUS)
        require(got == gpus, f"{where}.gpus ({got}) must equal the instance's GPUs ({gpus})")
    if "knobs" in inst and inst["knobs"] is not None:
        _check_knobs(inst["knobs"], f"{where}.knobs")
    return gpus


def _check_knobs(knobs: Any, where: str) -> None:
    knobs = _obj(knobs, where)
    for key, types in KNOB_TYPES.items():
        if key not in knobs:
            continue
        v = knobs[key]
        ok = isinstance(v, types) and (bool in types or not isinstance(v, bool))
        names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
        require(ok, f"{where}.{key} ({show(v)}) must be of type {names}")
    if "mtp" in knobs:
        _int(knobs, "mtp", where, 0, MAX_MTP)


def _check_pools(pools: Mapping[str, Any]) -> None:
    where = "plan.details.disaggregation"
    total = 0
    for role in ("prefill", "decode"):
        inst = _obj(pools.get(role), f"{where}.{role}")
        n = _int(inst, "instances", f"{where}.{role}", 1, MAX_GPUS)
        total += n * _check_instance(inst, f"{where}.{role}")
    if "gpus" in pools:
        got = _int(pools, "gpus", where, 1, MAX_GPUS)
        require(got == total, f"{where}.gpus ({got}) must equal its pools' GPUs ({total})")


def _check_serving(serving: Mapping[str, Any]) -> None:
    where = "plan.predicted.serving"
    if serving.get("knobs") is not None:
        _check_knobs(serving["knobs"], f"{where}.knobs")
    got = _int(serving, "gpus", where, 1, MAX_GPUS) if "gpus" in serving else None
    reps = _int(serving, "replicas", where, 1, MAX_GPUS) if "replicas" in serving else 1
    if "serve_layout" not in serving:
        return
    inst = _obj(serving["serve_layout"], f"{where}.serve_layout")
    gpus = _check_instance(inst, f"{where}.serve_layout")
    if got is not None:
        require(
            got == gpus * reps,
            f"{where}.gpus ({got}) must equal serve_layout GPUs x replicas ({gpus}*{reps})",
        )


def check_plan_model(plan: Any, model: ModelSpec) -> None:
    """Check ``plan`` (a :class:`~moeplan.planners.plan.Plan`) against ``model``: a pipeline
    plan's modules run every decoder layer of the model exactly once, in order."""
    check_plan(plan.to_dict())  # a Plan built in code, not read from a file, is checked too
    if FAMILY[plan.family].layout != "stages":
        return
    n = model.num_layers
    want = [(kind, layer) for layer in range(n) for kind in ("attn", "ffn")]
    k = 0
    for j, st in enumerate(plan.layout["stages"]):
        for i, m in enumerate(st["modules"]):
            got = ("attn" if m["kind"] == "attn" else "ffn", m["layer"])
            need = want[k] if k < len(want) else None
            require(
                got == need,
                f"plan.layout.stages[{j}].modules[{i}] ({m['kind']} layer {m['layer']}) must be "
                + (f"{need[0]} of layer {need[1]}" if need else "absent")
                + f": {model.name}'s {n} decoder layers each run once, attention then its FFN",
            )
            k += 1
    require(
        k == len(want),
        f"plan.layout.stages ({k} modules) must run all {len(want)} modules of "
        f"{model.name}'s {n} decoder layers",
    )
