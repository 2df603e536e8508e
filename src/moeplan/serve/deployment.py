"""Deployment: the one closed type of what moeplan deploys — a sum of five variants.

Every family's plan is one of these (the families' hooks, :data:`FROM_PLAN`, read a
``plan.json`` into one):

=================  ========================================================  ============
variant            what runs                                                 plan family
=================  ========================================================  ============
:class:`Colocated` ``replicas`` copies of one engine instance                ``strategy``
                   (:class:`~moeplan.planners.layout.Layout`)                / ``ep``
:class:`PDLayout`  ``x`` prefill instances and ``y`` decode instances        ``strategy``
                   (:mod:`moeplan.serve.pools.pd` simulates them; the decode pool   (P/D) /
                   may be attention-FFN disaggregated)                        ``dep`` (AFD)
:class:`AFDLayout` one attention-FFN disaggregated decode instance:          ``dep``
                   ``ag`` attention GPUs + ``eg`` expert GPUs
                   (:mod:`moeplan.serve.pools.afd` prices its iterations)
:class:`Stages`    SMIDT's pipeline: ``pp`` stages of ``world_size / pp``    ``pipeline``
                   GPUs, a ``tp x ep x dpmoe`` cut per module
:class:`DEPGroups` FinDEP's disaggregated prefill: ``ag`` attention GPUs     ``dep``
                   and ``eg`` expert GPUs running one batch schedule
=================  ========================================================  ============

Each variant has its GPU count (:attr:`Deployment.gpus`, every replica and pool
together), one text form (:attr:`Deployment.label`) that :func:`parse` reads back to an equal
deployment (``--pd``'s ``X*LAYOUT:Y*LAYOUT`` is the P/D variant's command-line spelling,
:mod:`moeplan.serve.pools.pd_spec`), and its ``plan.json`` form (:meth:`Deployment.plan_layout`,
the keys the families write today; :func:`from_plan` reads them back). Callers branch on a
deployment with :meth:`Deployment.visit` (one handler per variant) or its own methods, never
with ``isinstance``: a test (``tests/test_architecture_deployment.py``) holds every
``isinstance``/``type()`` check of a variant to this module.

It sits in ``serve`` because the P/D and AFD variants are the serving simulator's deployments
(``planners`` cannot name them: no planner imports the simulator); it needs nothing of
``serve`` but the instance knobs a pool was priced with, and the colocated variant wraps the
layout type of the layer below (:class:`~moeplan.planners.layout.Layout`). The runtime's mesh (:func:`moeplan.runtime.mesh.mesh_from_plan`)
and the launch plan (:func:`moeplan.export.deployment.place`) read the ``plan.json`` form
and :meth:`Deployment.pools`, from the layers above. Pure data and parsing: no torch, no I/O.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from moeplan.errors import MoeplanError, require
from moeplan.planners.layout import Layout, layout_int
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.pools.pd_spec import GRAMMAR, parse_tokens

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One pool of a deployment as the engines launch it: ``count`` instances of ``layout``
    in ``role`` (``colocated``, ``prefill`` or ``decode``), with the instance knobs and the
    prefill chunk the plan priced (None: the engine's defaults)."""

    role: str
    layout: Layout
    count: int
    knobs: Any = None
    chunk: int | None = None


class Deployment(ABC):
    """Base of the five variants (module docstring). Not constructed itself."""

    __slots__ = ()

    @property
    @abstractmethod
    def gpus(self) -> int:
        """GPUs of the whole deployment (every replica, every pool)."""

    @property
    @abstractmethod
    def label(self) -> str:
        """The one text form; :func:`parse` reads it back."""

    @property
    @abstractmethod
    def plan_family(self) -> str:
        """``plan.json``'s ``family`` of this deployment."""

    @abstractmethod
    def plan_layout(self) -> dict[str, Any]:
        """``plan.json``'s ``layout`` of this deployment (docs/API.md)."""

    def __str__(self) -> str:
        return self.label

    def visit(
        self,
        *,
        colocated: Callable[[Colocated], T] | None = None,
        pd: Callable[[PDLayout], T] | None = None,
        afd: Callable[[AFDLayout], T] | None = None,
        stages: Callable[[Stages], T] | None = None,
        dep: Callable[[DEPGroups], T] | None = None,
        default: Callable[[Deployment], T] | None = None,
    ) -> T:
        """The handler of this variant applied to it (``default`` for variants not given).
        Neither given is a caller's bug, not a user's error: :class:`TypeError`, which no
        "infeasible" handler (``except MoeplanError``) swallows."""
        match self:
            case Colocated():
                got: Callable[[Any], T] | None = colocated
            case PDLayout():
                got = pd
            case AFDLayout():
                got = afd
            case Stages():
                got = stages
            case DEPGroups():
                got = dep
            case _:
                raise TypeError(f"{type(self).__name__} is not a deployment variant")
        got = got or default
        if got is None:
            raise TypeError(f"no handler for a {type(self).__name__} deployment ({self.label})")
        return got(self)

    @property
    def colocated_layout(self) -> Layout | None:
        """The engine instance's layout (its replicas included) when this deployment is
        replicas of one colocated instance; None otherwise."""
        return None

    @property
    def redundant_experts(self) -> int:
        """Redundant experts per MoE layer of a colocated instance (0 for pools and groups)."""
        return 0

    def pools(self) -> tuple[PoolSpec, ...]:
        """What SGLang/vLLM launch: one colocated pool, a prefill and a decode pool, or
        nothing (no engine launches AFD decode, SMIDT's per-module stages or FinDEP's
        schedule)."""
        return ()


@dataclass(frozen=True, slots=True)
class Colocated(Deployment):
    """``layout.replicas`` copies of one colocated engine instance."""

    layout: Layout

    def __post_init__(self) -> None:
        require(
            isinstance(self.layout, Layout),
            f"a colocated deployment needs a Layout, not {type(self.layout).__name__}",
        )

    @property
    def gpus(self) -> int:
        return self.layout.total_gpus

    @property
    def label(self) -> str:
        return self.layout.label

    @property
    def plan_family(self) -> str:
        return "strategy"

    def plan_layout(self) -> dict[str, Any]:
        return self.layout.plan_layout()

    @property
    def colocated_layout(self) -> Layout:
        return self.layout

    @property
    def redundant_experts(self) -> int:
        return self.layout.redundant_experts

    def pools(self) -> tuple[PoolSpec, ...]:
        return (PoolSpec(role="colocated", layout=engine_layout(self.layout),
                         count=self.layout.replicas),)  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class AFDLayout(Deployment):
    """One attention-FFN disaggregated decode instance: ``ag`` attention GPUs + ``eg`` expert
    GPUs (:mod:`moeplan.serve.pools.afd` prices its iterations)."""

    ag: int
    eg: int
    gpus: int = field(init=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        for f in ("ag", "eg"):
            v = getattr(self, f)
            require(isinstance(v, int) and v >= 1, f"afd.{f} ({v!r}) must be a positive integer")
        object.__setattr__(self, "gpus", self.ag + self.eg)

    @property
    def label(self) -> str:
        return f"AFD AG{self.ag}+EG{self.eg}"

    @property
    def plan_family(self) -> str:
        return "dep"

    @property
    def moe_ep(self) -> int:
        """Expert GPUs (the expert-parallel degree of the instance)."""
        return self.eg

    def plan_layout(self) -> dict[str, Any]:
        return {"world_size": self.gpus, "ag": self.ag, "eg": self.eg}

    def to_dict(self) -> dict[str, int | str]:
        """The flat form of a P/D deployment's decode pool (``details.disaggregation``)."""
        return {"kind": "afd", "ag": self.ag, "eg": self.eg, "gpus": self.gpus}


#: What a decode pool's instance is: a colocated layout or an AFD instance.
DecodeLayout = Layout | AFDLayout


@dataclass(frozen=True, kw_only=True, slots=True)
class PDLayout(Deployment):
    """``x`` prefill instances of ``prefill`` and ``y`` decode instances of ``decode``."""

    prefill: Layout
    decode: DecodeLayout
    x: int
    y: int
    #: the instance knobs each pool was priced with (MoE all-to-all, two-batch overlap;
    #: ``None``: the engine's defaults) — what the launch scripts pass; not part of identity
    prefill_knobs: InstanceKnobs | None = field(default=None, compare=False)
    decode_knobs: InstanceKnobs | None = field(default=None, compare=False)
    #: the prefill instances' chunked-prefill budget (prompt tokens per iteration, the whole
    #: instance) they were priced with — what the launch scripts pass; None: engine default
    prefill_chunk: int | None = field(default=None, compare=False)
    gpus: int = field(init=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        for f in ("x", "y"):
            v = getattr(self, f)
            require(isinstance(v, int) and v >= 1, f"pd.{f} ({v!r}) must be a positive integer")
        require(
            isinstance(self.prefill, Layout),
            f"pd.prefill ({self.prefill.label}) must be a colocated layout",
        )
        object.__setattr__(self, "gpus", self.x * self.prefill.gpus + self.y * self.decode.gpus)

    @property
    def family(self) -> str:
        """The serving family: ``pd`` (colocated decode) or ``afd``."""
        return "afd" if isinstance(self.decode, AFDLayout) else "pd"

    @property
    def label(self) -> str:
        return (  # no square brackets: rich reads them as markup
            f"PD {self.x}x({self.prefill.label}) : {self.y}x({self.decode.label}),"
            f" {self.x}:{self.y}"
        )

    @property
    def decode_instance(self) -> Colocated | AFDLayout:
        """The decode instance as a deployment of its own."""
        return instance(self.decode)

    @property
    def plan_family(self) -> str:
        return self.decode_instance.plan_family

    @property
    def moe_ep(self) -> int:
        """The decode instances' expert-parallel degree (what placement would target)."""
        return self.decode.moe_ep

    def plan_layout(self) -> dict[str, Any]:
        """The decode instance's layout (the pools are ``details.disaggregation``,
        :meth:`to_dict`)."""
        return self.decode_instance.plan_layout()

    def to_dict(self) -> dict[str, object]:
        """``details.disaggregation`` of a P/D ``plan.json`` (:func:`pd_from_dict` reads it)."""
        return {
            "kind": self.family,
            "prefill": {
                **self.prefill.to_dict(),
                "instances": self.x,
                **_knobs(self.prefill_knobs),
                **({} if self.prefill_chunk is None else {"chunk_tokens": self.prefill_chunk}),
            },
            "decode": {**self.decode.to_dict(), "instances": self.y, **_knobs(self.decode_knobs)},
            "gpus": self.gpus,
        }

    def pools(self) -> tuple[PoolSpec, ...]:
        if isinstance(self.decode, AFDLayout):
            return ()
        return (
            PoolSpec(role="prefill", layout=engine_layout(self.prefill), count=self.x,
                     knobs=self.prefill_knobs, chunk=self.prefill_chunk),
            PoolSpec(role="decode", layout=engine_layout(self.decode), count=self.y,
                     knobs=self.decode_knobs),
        )  # fmt: skip


def _knobs(knobs: InstanceKnobs | None) -> dict[str, object]:
    return {} if knobs is None else {"knobs": knobs.to_dict()}


@dataclass(frozen=True, slots=True)
class StageModule:
    """One module of a pipeline stage: ``kind`` attn|moe|mlp, decoder ``layer``, and its cut
    ``tp x ep x dpmoe`` over the stage's GPUs (SMIDT §IV)."""

    kind: str
    layer: int
    tp: int
    ep: int
    dpmoe: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "layer": self.layer, "tp": self.tp, "ep": self.ep,
                "dpmoe": self.dpmoe}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Stage:
    """Modules ``[start_module, end_module)`` of the model on one pipeline stage."""

    start_module: int
    end_module: int
    modules: tuple[StageModule, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"start_module": self.start_module, "end_module": self.end_module,
                "modules": [m.to_dict() for m in self.modules]}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Stages(Deployment):
    """SMIDT's pipeline: ``pp`` stages over ``world_size`` GPUs, a cut per module."""

    world_size: int
    stages: tuple[Stage, ...]
    pp: int = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.stages)
        require(n >= 1, "a pipeline needs at least one stage")
        require(
            self.world_size >= 1 and self.world_size % n == 0,
            f"pipeline world_size ({self.world_size}) must be a positive multiple of pp ({n})",
        )
        object.__setattr__(self, "pp", n)

    @property
    def gpus(self) -> int:
        return self.world_size

    @property
    def label(self) -> str:
        """``stages PP{pp} on {world_size} GPUs: {start}-{end} {kind}{layer} {tp}x{ep}x{dpmoe},
        ... | ...``."""
        parts = [
            f"{s.start_module}-{s.end_module} "
            + ", ".join(f"{m.kind}{m.layer} {m.tp}x{m.ep}x{m.dpmoe}" for m in s.modules)
            for s in self.stages
        ]
        return f"stages PP{self.pp} on {self.world_size} GPUs: " + " | ".join(parts)

    @property
    def plan_family(self) -> str:
        return "pipeline"

    def plan_layout(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "pp": self.pp,
                "stages": [s.to_dict() for s in self.stages]}  # fmt: skip


@dataclass(frozen=True, slots=True)
class DEPGroups(Deployment):
    """FinDEP's disaggregated prefill: ``ag`` attention GPUs and ``eg`` expert GPUs."""

    ag: int
    eg: int

    def __post_init__(self) -> None:
        for f in ("ag", "eg"):
            v = getattr(self, f)
            require(isinstance(v, int) and v >= 1, f"dep.{f} ({v!r}) must be a positive integer")

    @property
    def gpus(self) -> int:
        return self.ag + self.eg

    @property
    def label(self) -> str:
        return f"DEP AG{self.ag}+EG{self.eg}"

    @property
    def plan_family(self) -> str:
        return "dep"

    def plan_layout(self) -> dict[str, Any]:
        return {"world_size": self.gpus, "ag": self.ag, "eg": self.eg}


#: The variants, the closed set (``tests/test_architecture_deployment.py`` reads it).
VARIANTS: tuple[type[Deployment], ...] = (Colocated, PDLayout, AFDLayout, Stages, DEPGroups)


def instance(layout: Layout | AFDLayout) -> Colocated | AFDLayout:
    """One serving instance's layout (a pool's) as a deployment."""
    return layout if isinstance(layout, AFDLayout) else Colocated(layout)


def of(x: Layout | Deployment) -> Deployment:
    """``x`` as a deployment: a colocated layout wrapped, a deployment as is."""
    return x if isinstance(x, Deployment) else Colocated(x)


def launch_kind(d: Deployment) -> str:
    """What an engine must launch to run ``d`` (:attr:`moeplan.backends.EngineBackend.deployments`):
    ``colocated``, ``pd`` (colocated prefill and decode pools), ``afd`` (an attention-FFN
    instance, alone or as a decode pool), ``stages`` or ``dep``."""
    return d.visit(
        colocated=lambda _: "colocated",
        pd=lambda p: p.family,  # "pd", or "afd" for an AFD decode pool
        afd=lambda _: "afd",
        stages=lambda _: "stages",
        dep=lambda _: "dep",
    )


def require_launchable(engine: str, d: Deployment) -> None:
    """One line naming the engine's rule when ``engine`` cannot launch ``d``
    (:meth:`moeplan.backends.EngineBackend.deployment_blocker`)."""
    from moeplan.backends import backend

    why = backend(engine).deployment_blocker(launch_kind(d))
    if why is not None:
        raise MoeplanError(f"--engine ({engine}) cannot run {d.label}: {why}")


def is_colocated_prefill(layout: Layout | AFDLayout) -> bool:
    """Whether ``layout`` can be a prefill pool's instance (a colocated layout, not AFD)."""
    return isinstance(layout, Layout)


def engine_layout(layout: Layout) -> Layout:
    """The layout an engine instance is launched with: its TP/DP/EP/PP degrees (redundant
    experts, micro-batches and dense TP are launch flags of their own)."""
    return Layout(attn_tp=layout.attn_tp, attn_dp=layout.attn_dp, moe_tp=layout.moe_tp,
                  moe_ep=layout.moe_ep, pp=layout.pp)  # fmt: skip


# --- the one grammar --------------------------------------------------------------------

_LABEL = re.compile(
    r"attn TP(?P<attn_tp>\d+)xDP(?P<attn_dp>\d+) / MoE TP(?P<moe_tp>\d+)xEP(?P<moe_ep>\d+)"
    r"(?:\+R(?P<redundant_experts>\d+))?(?P<fused> fused)?(?: / dense TP(?P<dense_tp>\d+))?"
    r"(?: / PP(?P<pp>\d+)x(?P<micro_batches>\d+)mb)?(?: x(?P<replicas>\d+) replicas)?"
)
_AFD_LABEL = re.compile(r"AFD AG(?P<ag>\d+)\+EG(?P<eg>\d+)")
_DEP_LABEL = re.compile(r"DEP AG(?P<ag>\d+)\+EG(?P<eg>\d+)")
_PD_LABEL = re.compile(
    r"PD (?P<x>\d+)x\((?P<pre>[^()]*)\) : (?P<y>\d+)x\((?P<dec>[^()]*)\), (?P<x2>\d+):(?P<y2>\d+)"
)
_STAGES_LABEL = re.compile(r"stages PP(?P<pp>\d+) on (?P<world>\d+) GPUs: (?P<stages>.*)")
_STAGE = re.compile(r"(?P<start>\d+)-(?P<end>\d+) (?P<mods>.*)")
_MODULE = re.compile(r"(?P<kind>[a-z]+)(?P<layer>-?\d+) (?P<tp>\d+)x(?P<ep>\d+)x(?P<dpmoe>\d+)")


def parse_layout(text: str, where: str = "--pd") -> Layout | AFDLayout:
    """One serving instance: a layout's or an AFD instance's label, or the command line's
    dotted tokens (:mod:`moeplan.serve.pools.pd_spec`); one-line :class:`MoeplanError` naming
    ``where``."""
    text = text.strip()
    if m := _AFD_LABEL.fullmatch(text):
        return AFDLayout(ag=int(m["ag"]), eg=int(m["eg"]))
    if m := _LABEL.fullmatch(text):
        fields: dict[str, Any] = {k: int(v) for k, v in m.groupdict().items()
                                  if v is not None and k != "fused"}  # fmt: skip
        fields |= {"fused": True} if m["fused"] else {}
    else:
        fields, afd = parse_tokens(text, where)
        if afd:
            require(
                not fields and set(afd) == {"ag", "eg"},
                f"{where} layout ({text!r}): an AFD instance is exactly agN.egN",
            )
            return AFDLayout(**afd)
    require(bool(fields), f"{where} layout ({text!r}) is empty; the grammar is {GRAMMAR}")
    try:
        return Layout(**fields)
    except MoeplanError as err:
        raise MoeplanError(f"{where} layout ({text!r}): {err}") from None


def parse_pd(text: str, where: str = "--pd") -> PDLayout:
    """``X*LAYOUT:Y*LAYOUT`` or a P/D label -> :class:`PDLayout`."""
    text = text.strip()
    if m := _PD_LABEL.fullmatch(text):
        require(
            (m["x"], m["y"]) == (m["x2"], m["y2"]),
            f"{where} ({text!r}): the instance counts and their ratio differ",
        )
        parts = [f"{m['x']}*{m['pre']}", f"{m['y']}*{m['dec']}"]
    else:
        parts = text.split(":")
    require(len(parts) == 2, f"{where} ({text!r}) must be {GRAMMAR}")
    pools = []
    for role, part in zip(("prefill", "decode"), parts, strict=True):
        count, star, lay = part.partition("*")
        require(
            star == "*" and count.strip().isdigit() and int(count) >= 1,
            f"{where} {role} pool ({part!r}) must be X*LAYOUT with X a positive integer",
        )
        pools.append((int(count), parse_layout(lay, f"{where} {role}")))
    (x, pre), (y, dec) = pools
    require(
        is_colocated_prefill(pre),
        f"{where} prefill layout ({parts[0]!r}) must be a colocated layout, not an AFD instance",
    )
    return PDLayout(prefill=pre, decode=dec, x=x, y=y)  # type: ignore[arg-type]


def _parse_stages(m: re.Match[str], text: str) -> Stages:
    stages = []
    for part in m["stages"].split(" | "):
        s = _STAGE.fullmatch(part)
        require(s is not None, f"pipeline stage ({part!r}) must be START-END MODULES")
        assert s is not None  # checked just above
        mods = []
        for mod in s["mods"].split(", "):
            mm = _MODULE.fullmatch(mod)
            require(mm is not None, f"pipeline module ({mod!r}) must be KINDLAYER TPxEPxDPMOE")
            assert mm is not None  # checked just above
            mods.append(StageModule(kind=mm["kind"], layer=int(mm["layer"]), tp=int(mm["tp"]),
                                    ep=int(mm["ep"]), dpmoe=int(mm["dpmoe"])))  # fmt: skip
        stages.append(Stage(int(s["start"]), int(s["end"]), tuple(mods)))
    out = Stages(world_size=int(m["world"]), stages=tuple(stages))
    require(out.pp == int(m["pp"]), f"pipeline ({text!r}) lists {out.pp} stages, not PP{m['pp']}")
    return out


def parse(text: str, where: str = "deployment") -> Deployment:
    """The deployment a :attr:`Deployment.label` (or ``--pd``'s ``X*LAYOUT:Y*LAYOUT``, or a
    LAYOUT's dotted tokens) describes; ``parse(d.label) == d`` for every deployment ``d``."""
    text = text.strip()
    if m := _STAGES_LABEL.fullmatch(text):
        return _parse_stages(m, text)
    if m := _DEP_LABEL.fullmatch(text):
        return DEPGroups(ag=int(m["ag"]), eg=int(m["eg"]))
    if text.startswith("PD ") or "*" in text:
        return parse_pd(text, where)
    return instance(parse_layout(text, where))


# --- plan.json -----------------------------------------------------------------------------


def _pd_instance(d: Mapping[str, Any]) -> Layout | AFDLayout:
    if d.get("kind") == "afd":
        return AFDLayout(ag=int(d["ag"]), eg=int(d["eg"]))
    return Layout.from_dict(d)


def pd_from_dict(d: Any, where: str = "plan.details.disaggregation") -> PDLayout:
    """The deployment of a P/D ``plan.json`` (``details.disaggregation``, as written by
    :meth:`PDLayout.to_dict`)."""
    require(isinstance(d, dict), f"{where} must be an object with prefill and decode pools")
    try:
        pre = _pd_instance(d["prefill"])
        dec: DecodeLayout = _pd_instance(d["decode"])
        x, y = int(d["prefill"]["instances"]), int(d["decode"]["instances"])
    except (KeyError, TypeError, ValueError) as err:
        raise MoeplanError(f"{where} is malformed: {type(err).__name__}: {err}") from None
    require(is_colocated_prefill(pre), f"{where}.prefill must be a colocated layout")
    return PDLayout(prefill=pre, decode=dec, x=x, y=y)  # type: ignore[arg-type]


def _stages_from_plan(layout: Mapping[str, Any]) -> Stages:
    where = "plan.layout"
    stages = layout.get("stages")
    require(isinstance(stages, list), f"{where}.stages must be a list of stages")
    assert isinstance(stages, list)  # checked just above
    return Stages(
        world_size=layout_int(layout, "world_size", where),
        stages=tuple(
            Stage(
                start_module=int(s["start_module"]),
                end_module=int(s["end_module"]),
                modules=tuple(
                    StageModule(
                        kind=str(m["kind"]),
                        layer=int(m.get("layer", -1)),
                        tp=int(m["tp"]),
                        ep=int(m["ep"]),
                        dpmoe=int(m["dpmoe"]),
                    )
                    for m in s.get("modules") or []
                ),  # fmt: skip
            )
            for s in stages
        ),
    )


def _groups_from_plan(layout: Mapping[str, Any]) -> DEPGroups:
    return DEPGroups(ag=layout_int(layout, "ag", "plan.layout"),
                     eg=layout_int(layout, "eg", "plan.layout"))  # fmt: skip


def _colocated_from_plan(layout: Mapping[str, Any]) -> Colocated:
    return Colocated(Layout.from_plan_layout(layout))


#: Each plan family's hook: its ``plan.json`` layout (and details) -> its deployment, keyed by
#: ``plan.family`` (:data:`moeplan.planners.families.PLAN_FAMILIES`). A P/D plan (family
#: ``strategy`` with ``details.disaggregation``) is read as its pools.
FROM_PLAN: dict[str, Callable[[Mapping[str, Any]], Deployment]] = {
    "strategy": _colocated_from_plan,
    "ep": _colocated_from_plan,
    "pipeline": _stages_from_plan,
    "dep": _groups_from_plan,
}


def from_plan(plan: Any) -> Deployment:
    """The deployment of a :class:`~moeplan.planners.plan.Plan`: its P/D pools when
    ``details.disaggregation`` is there, else its family's hook (:data:`FROM_PLAN`)."""
    pools = (plan.details or {}).get("disaggregation")
    if pools is not None:
        return pd_from_dict(pools)
    require(plan.family in FROM_PLAN, f"plan.family ({plan.family!r}) has no deployment reader")
    return FROM_PLAN[plan.family](plan.layout)


def with_replicas(layout: Layout, replicas: int) -> Colocated:
    """``replicas`` copies of one instance ``layout``."""
    return Colocated(replace(layout, replicas=replicas))
