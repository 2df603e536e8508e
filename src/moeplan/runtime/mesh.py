"""Rank arithmetic of a :class:`~moeplan.planners.plan.Plan` (``plan.json``, docs/API.md). Pure.

No torch here, so the planner side and tests can use it. A :class:`Mesh` says, for every rank,
its role (attention / expert / both), its coordinates on each axis, and lists every process
group as a tuple of ranks keyed by axis name; :mod:`moeplan.runtime.comm.groups` turns those lists
into ``torch.distributed`` groups in one place.

Rank order (like picotron's ``arange(world).view(pp, dp, tp)``): the pipeline stage is the
slowest axis; inside a stage of ``r = world/pp`` ranks TP is the fastest axis, so TP groups are
contiguous ranks (intra-node, as MixServe assumes) and DP/EP groups stride by ``tp``. For the
``pipeline`` family each module's ``(tp, ep, dpmoe)`` is laid out ``[dpmoe, ep, tp]`` inside its
stage. For ``dep``, ranks ``0..ag-1`` are attention and ``ag..world-1`` experts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from moeplan.errors import MoeplanError, require
from moeplan.planners.layout import Layout, layout_int
from moeplan.planners.plan import Plan

Groups = dict[str, tuple[tuple[int, ...], ...]]


def grid_groups(ranks: list[int], axes: list[tuple[str, int]]) -> Groups:
    """Groups along each named axis of ``ranks`` viewed as a row-major grid (last axis fastest)."""
    sizes = [s for _, s in axes]
    n = 1
    for s in sizes:
        n *= s
    assert n == len(ranks), (axes, len(ranks))
    out: Groups = {}
    for a, (name, size) in enumerate(axes):
        stride = 1
        for s in sizes[a + 1 :]:
            stride *= s
        groups = []
        for i in range(len(ranks)):
            if (i // stride) % size == 0:
                groups.append(tuple(ranks[i + j * stride] for j in range(size)))
        out[name] = tuple(groups)
    return out


def _int(layout: dict[str, Any], key: str, where: str = "plan.layout") -> int:
    return layout_int(_obj(layout, where), key, where)


def _obj(value: Any, where: str = "plan.layout") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MoeplanError(f"{where} ({type(value).__name__}) must be a JSON object")
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class StageModule:
    """One module of a pipeline stage: ``kind`` attn|moe|mlp, ``layer``, ``tp*ep*dpmoe``."""

    kind: str
    layer: int
    tp: int
    ep: int
    dpmoe: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Mesh:
    """Parallel layout of one plan; ``groups`` maps axis name to all its rank tuples.

    Colocated families carry their :class:`~moeplan.planners.layout.Layout` (the one layout
    type); DEP meshes carry ``ag``/``eg``; pipeline meshes their ``stages``.
    """

    family: str
    world_size: int
    pp: int = 1
    layout: Layout | None = None
    ag: int = 0
    eg: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    stages: tuple[tuple[StageModule, ...], ...] = ()

    @property
    def attn_tp(self) -> int:
        return self.layout.attn_tp if self.layout else 1

    @property
    def attn_dp(self) -> int:
        return self.layout.attn_dp if self.layout else 1

    @property
    def moe_tp(self) -> int:
        return self.layout.moe_tp if self.layout else 1

    @property
    def moe_ep(self) -> int:
        return self.layout.moe_ep if self.layout else 1

    @property
    def disaggregated(self) -> bool:
        """Attention ranks apart from expert ranks (``ag`` + ``eg``)."""
        return self.ag > 0

    @property
    def stage_size(self) -> int:
        return self.world_size // self.pp

    def stage_of(self, rank: int) -> int:
        return rank // self.stage_size

    def role(self, rank: int) -> str:
        """``attention`` or ``expert`` for DEP; ``both`` for colocated families."""
        if self.disaggregated:
            return "attention" if rank < self.ag else "expert"
        return "both"

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of ``rank`` on every axis of this family."""
        require(0 <= rank < self.world_size, f"rank ({rank}) must be in [0, {self.world_size})")
        if self.disaggregated:
            return {"ag": rank, "eg": -1} if rank < self.ag else {"ag": -1, "eg": rank - self.ag}
        local = rank % self.stage_size
        return {
            "pp": self.stage_of(rank),
            "attn_tp": local % self.attn_tp,
            "attn_dp": local // self.attn_tp,
            "moe_tp": local % self.moe_tp,
            "moe_ep": local // self.moe_tp,
        }

    def module_coords(self, rank: int, module: StageModule) -> dict[str, int]:
        """``tp``/``ep``/``dpmoe`` coordinates of ``rank`` for a pipeline module."""
        local = rank % self.stage_size
        return {
            "tp": local % module.tp,
            "ep": (local // module.tp) % module.ep,
            "dpmoe": local // (module.tp * module.ep),
        }

    def group_lists(self) -> Groups:
        """Every group of every axis (same order on every rank)."""
        if self.disaggregated:
            return {
                "world": (tuple(range(self.world_size)),),
                "ag": (tuple(range(self.ag)),),
                "eg": (tuple(range(self.ag, self.world_size)),),
            }
        out: Groups = {"world": (tuple(range(self.world_size)),)}
        r = self.stage_size
        out["pp"] = tuple(tuple(range(i, self.world_size, r)) for i in range(r))
        for s in range(self.pp):
            ranks = list(range(s * r, (s + 1) * r))
            if self.layout is not None:
                attn = grid_groups(ranks, [("attn_dp", self.attn_dp), ("attn_tp", self.attn_tp)])
                moe = grid_groups(ranks, [("moe_ep", self.moe_ep), ("moe_tp", self.moe_tp)])
                for name, gs in [*attn.items(), *moe.items()]:
                    out[name] = out.get(name, ()) + gs
            for m in self.stages[s] if self.stages else ():
                key = f"tp{m.tp}.ep{m.ep}.d{m.dpmoe}"
                g = grid_groups(ranks, [("dpmoe", m.dpmoe), ("ep", m.ep), ("tp", m.tp)])
                g["replica"] = grid_groups(ranks, [("d", m.dpmoe), ("r", m.ep * m.tp)])["r"]
                for axis, gs in g.items():
                    name = f"{key}.{axis}"
                    if gs[0] not in out.get(name, ()):
                        out[name] = out.get(name, ()) + gs
        return out

    def group_of(self, axis: str, rank: int) -> tuple[int, ...]:
        """The ranks of ``axis`` that contain ``rank``."""
        for g in self.group_lists()[axis]:
            if rank in g:
                return g
        raise MoeplanError(f"axis ({axis}) has no group containing rank {rank}")


def strategy_as_pipeline(mesh: Mesh, num_layers: int) -> Mesh:
    """A ``strategy`` mesh with ``pp > 1`` as pipeline stages: decoder layers split evenly over
    the stages (earlier stages take the remainder), each layer's attention with
    ``(attn.tp, 1, attn.dp)`` and MoE with ``(moe.tp, moe.ep, 1)`` — MixServe's PP across
    decoder layers in SMIDT's module vocabulary."""
    require(num_layers >= mesh.pp, f"model layers ({num_layers}) must be >= pp ({mesh.pp})")
    base, extra = divmod(num_layers, mesh.pp)
    stages, layer = [], 0
    for s in range(mesh.pp):
        mods = []
        for _ in range(base + (s < extra)):
            mods += [
                StageModule(kind="attn", layer=layer, tp=mesh.attn_tp, ep=1, dpmoe=mesh.attn_dp),
                StageModule(kind="moe", layer=layer, tp=mesh.moe_tp, ep=mesh.moe_ep, dpmoe=1),
            ]
            layer += 1
        stages.append(tuple(mods))
    return Mesh(
        family="pipeline",
        world_size=mesh.world_size,
        pp=mesh.pp,
        details=mesh.details,
        stages=tuple(stages),
    )


def as_plan(plan: Plan | Mapping[str, Any]) -> Plan:
    """``plan`` as a :class:`Plan`; a decoded ``plan.json`` object goes through
    :meth:`Plan.from_dict`. Departure from the planners' files: a hand-written plan may omit
    ``model`` and ``cluster`` (the runtime then runs its default model), as before the Plan type."""
    if isinstance(plan, Plan):
        return plan
    if not isinstance(plan, Mapping):
        raise MoeplanError(f"plan ({type(plan).__name__}) must be a JSON object")
    return Plan.from_dict({"model": "", "cluster": "", **plan})


def mesh_from_plan(plan: Plan | Mapping[str, Any], world_size: int | None = None) -> Mesh:
    """Validate ``plan`` and build its :class:`Mesh`; ``world_size`` is the launch's, if known."""
    p = as_plan(plan)
    world = p.world_size
    if world_size is not None:
        require(
            world == world_size,
            f"plan.layout.world_size ({world}) must equal the launch world size ({world_size})",
        )
    return MESH_BUILDERS[p.family](p.family, p.layout, world, p.details)


def _strategy_mesh(
    family: str, layout: dict[str, Any], world: int, details: dict[str, Any]
) -> Mesh:
    lay = Layout.from_plan_layout({"world_size": world, **_obj(layout)})
    return Mesh(family=family, world_size=world, pp=lay.pp, layout=lay, details=details)


def _ep_mesh(family: str, layout: dict[str, Any], world: int, details: dict[str, Any]) -> Mesh:
    """Sem-MoE's EP deployment: attention DP, MoE EP, one stage."""
    mesh = _strategy_mesh(family, layout, world, details)
    require(
        mesh.attn_tp == 1 and mesh.moe_tp == 1 and mesh.pp == 1,
        f"plan.layout (attn.tp={mesh.attn_tp}, moe.tp={mesh.moe_tp}, pp={mesh.pp}) must be "
        f"1, 1, 1 for family {family}",
    )
    return mesh


def _dep_mesh(family: str, layout: dict[str, Any], world: int, details: dict[str, Any]) -> Mesh:
    ag, eg = _int(layout, "ag"), _int(layout, "eg")
    require(ag + eg == world, f"plan.layout ag+eg ({ag}+{eg}) must equal world_size ({world})")
    for key in ("r1", "r2", "ma"):
        _int(details, key, "plan.details")
    order = details.get("order", "ASAS")
    require(order in ("ASAS", "AASS"), f"plan.details.order ({order!r}) must be ASAS or AASS")
    return Mesh(family="dep", world_size=world, ag=ag, eg=eg, details=details)


def _pipeline_mesh(
    family: str, layout: dict[str, Any], world: int, details: dict[str, Any]
) -> Mesh:
    pp = _int(layout, "pp")
    require(world % pp == 0, f"plan.layout.pp ({pp}) must divide world_size ({world})")
    stages = layout.get("stages")
    require(
        isinstance(stages, list) and len(stages) == pp,
        f"plan.layout.stages (length {len(stages) if isinstance(stages, list) else stages!r}) "
        f"must be a list of pp={pp} stages",
    )
    assert isinstance(stages, list)  # checked just above
    r = world // pp
    parsed = []
    for s, st in enumerate(stages):
        mods = []
        for m in st.get("modules") or []:
            where = f"plan.layout.stages[{s}].modules"
            mod = StageModule(
                kind=str(m.get("kind")),
                layer=int(m.get("layer", -1)),
                tp=_int(m, "tp", where),
                ep=_int(m, "ep", where),
                dpmoe=_int(m, "dpmoe", where),
            )
            require(
                mod.kind in ("attn", "moe", "mlp"),
                f"{where}.kind ({mod.kind!r}) must be attn, moe or mlp",
            )
            require(
                mod.tp * mod.ep * mod.dpmoe == r,
                f"{where} tp*ep*dpmoe ({mod.tp}*{mod.ep}*{mod.dpmoe}) must equal world_size/pp ({r})",
            )
            mods.append(mod)
        require(
            bool(mods), f"plan.layout.stages[{s}].modules (empty) must list at least one module"
        )
        parsed.append(tuple(mods))
    return Mesh(family="pipeline", world_size=world, pp=pp, details=details, stages=tuple(parsed))


#: The mesh of each family that writes its own plan.json, keyed by family name
#: (:data:`moeplan.planners.families.PLAN_FAMILIES`).
MESH_BUILDERS = {
    "strategy": _strategy_mesh,
    "ep": _ep_mesh,
    "dep": _dep_mesh,
    "pipeline": _pipeline_mesh,
}
