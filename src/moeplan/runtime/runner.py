"""Run one plan on this rank: validate, build the engine and its groups, check, record a trace.

:func:`prepare` is pure validation (same error on every rank, before any collective, so a bad
plan never hangs): it builds the family's engine from the registry
(:data:`moeplan.runtime.engines.FAMILY_ENGINES`). :func:`run_rank` runs that engine on this rank. With
``check`` every rank also runs the single-process reference on the same weights and inputs and
reports its max abs error. Plans are :class:`~moeplan.planners.plan.Plan` objects; a decoded
``plan.json`` object is accepted and converted (:func:`moeplan.runtime.mesh.as_plan`).
:func:`run_plans` runs many plans on one process group (one spawn for many plans: the preset
grid test): a plan of ``w`` ranks runs on ranks ``0..w-1`` of a larger world, its groups are
destroyed after it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from moeplan.errors import MoeplanError, require
from moeplan.planners.plan import Plan
from moeplan.runtime.config import MoEConfig, from_model_spec
from moeplan.runtime.mesh import as_plan, mesh_from_plan
from moeplan.runtime.options import RunOptions, resolve
from moeplan.specs import load_model

if TYPE_CHECKING:
    from moeplan.runtime.engines.base import Engine

__all__ = [
    "RunOptions",
    "model_config",
    "predicted_path",
    "prepare",
    "run_plans",
    "run_rank",
    "spawned_rank",
]

PlanLike = Plan | Mapping[str, Any]


def model_config(plan: Plan, opts: RunOptions) -> MoEConfig:
    """The runtime config: explicit, else ``opts.model`` / ``plan.model`` through moeplan.specs."""
    if opts.config is not None:
        return opts.config
    name = opts.model or plan.model
    if not name:
        return MoEConfig()
    return from_model_spec(load_model(name), opts.scale)


def prepare(plan: PlanLike, world_size: int, opts: RunOptions) -> tuple[Engine, int]:
    """Validate ``plan`` against the launch; returns (engine, global batch in sequences)."""
    from moeplan.runtime.engines import engine_for

    p = as_plan(plan)
    mesh = mesh_from_plan(p, world_size)
    opts = resolve(p, opts)
    cfg = model_config(p, opts)
    engine = engine_for(mesh, cfg)
    return engine, engine.global_batch(opts.seq_len, opts.batch_tokens)


def predicted_path(trace: str) -> str:
    """``out.json`` -> ``out.predicted.json`` (the simulator's timeline next to the measured)."""
    return trace[:-5] + ".predicted.json" if trace.endswith(".json") else trace + ".predicted.json"


def _write_traces(
    engine: Engine, plan: Plan, opts: RunOptions, gathered: list[Any], link_s: float | None
) -> dict[str, Any]:
    """Rank 0: merged measured trace, and the engine's simulator prediction beside it."""
    from moeplan.runtime.timeline import write_trace

    events = [e for ev, _ in gathered for e in ev]
    measured = max(w for _, w in gathered)
    info: dict[str, Any] = {"measured_makespan_s": measured}
    if not opts.trace:
        return info
    write_trace(
        events,
        opts.trace,
        family=engine.mesh.family,
        plan_layout=plan.layout,
        source="moeplan.runtime (measured)",
        otherData={"measured_makespan_s": measured},
    )
    info["trace"] = opts.trace
    pred = engine.predicted_trace(events, link_s, measured, opts.seq_len)
    if pred is not None:
        path = predicted_path(opts.trace)
        write_trace(pred.pop("traceEvents"), path, **pred)
        info.update(
            predicted_trace=path, predicted_makespan_s=pred["otherData"]["predicted_makespan_s"]
        )
    return info


def _weights(cfg: MoEConfig, opts: RunOptions, device: Any) -> list[Any]:
    from moeplan.runtime.layers.model import init_model, to_device

    if opts.weights:
        from moeplan.runtime.layers.weights import load_safetensors

        return to_device(load_safetensors(list(opts.weights), cfg), device)
    return to_device(init_model(cfg, opts.seed), device)


def run_rank(rank: int, world_size: int, plan: PlanLike, opts: RunOptions) -> dict[str, Any]:
    """Run ``plan`` on this rank (process group already initialised); returns a JSON-able report."""
    import torch
    import torch.distributed as dist

    from moeplan.runtime.engines import RunContext
    from moeplan.runtime.layers.decoder import reference_forward
    from moeplan.runtime.layers.model import make_inputs
    from moeplan.runtime.timeline import Timeline

    p = as_plan(plan)
    opts = resolve(p, opts)
    engine, batch = prepare(p, world_size, opts)
    cfg = engine.cfg
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    layers = _weights(cfg, opts, device)
    x = make_inputs(cfg, batch, opts.seq_len, opts.seed + 1).to(device)
    tl = Timeline(rank, torch.cuda.synchronize if cuda else None)
    team = _team(world_size)
    ctx = RunContext(rank=rank, shape=tuple(x.shape), groups=engine.groups(rank), tl=tl, opts=opts)
    with torch.no_grad():
        for _ in range(opts.warmup):  # first calls pay one-off allocation and dispatch costs
            engine.run(engine.local_input(x, rank), layers, ctx)
    link_s = engine.calibrate(ctx, str(device))
    dist.barrier(group=team)
    tl.reset()
    start = time.perf_counter()
    with torch.no_grad():
        out = engine.run(engine.local_input(x, rank), layers, ctx)
    wall = time.perf_counter() - start
    err = None
    if opts.check and out is not None:
        with torch.no_grad():
            ref = engine.reference_output(reference_forward(x, layers, cfg), rank)
        err = float((out - ref).abs().max()) if out.numel() else 0.0
    gathered: list[Any] | None = [None] * world_size if rank == 0 else None
    dist.gather_object((tl.trace_events(), wall), gathered, dst=0, group=team)
    _release(ctx.groups, team)
    report = {
        "rank": rank,
        "role": engine.mesh.role(rank),
        "max_abs_err": err,
        "wall_s": wall,
        "tokens": batch * opts.seq_len,
        "family": engine.mesh.family,
        **ctx.extra,
    }
    if rank == 0:
        assert gathered is not None
        report.update(_write_traces(engine, p, opts, gathered, link_s))
    return report


def _team(world_size: int) -> Any:
    """The group of the plan's ranks ``0..world_size-1`` (None: the whole process group).
    Collective over the whole process group, like every ``new_group``."""
    import torch.distributed as dist

    whole = dist.get_world_size()
    return None if world_size == whole else dist.new_group(list(range(world_size)))


def _release(groups: Any, team: Any) -> None:
    """Destroy this rank's groups of a finished plan (not the whole process group's): a
    process that runs many plans would otherwise keep every plan's connections open."""
    import torch.distributed as dist

    handles = {id(h): h for h in (groups.handles.values() if groups is not None else ())}
    if team is not None and team is not dist.GroupMember.NON_GROUP_MEMBER:
        handles[id(team)] = team
    for h in handles.values():
        if h is not dist.group.WORLD and h is not dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(h)


def run_plans(
    rank: int, world_size: int, plans: Sequence[PlanLike], opts: Sequence[RunOptions]
) -> list[dict[str, Any] | None]:
    """Run ``plans`` one after another on one process group of ``world_size`` ranks (the
    process group already initialised). A plan of ``w <= world_size`` ranks runs on ranks
    ``0..w-1``; the others only take part in creating its groups (``new_group`` is collective
    over the whole process group) and report None for it. A plan the runtime refuses (the same
    validation on every rank, before any collective) reports ``{"error": line}``."""
    out: list[dict[str, Any] | None] = []
    for plan, o in zip(plans, opts, strict=True):
        p = as_plan(plan)
        w = p.world_size
        require(w <= world_size, f"plan.layout.world_size ({w}) must be <= {world_size} ranks")
        try:
            if rank < w:
                out.append(run_rank(rank, w, p, o))
                continue
            engine, _ = prepare(p, w, o)
        except MoeplanError as err:
            out.append({"error": str(err)})
            continue
        team = _team(w)  # the same collectives, in the same order, as run_rank's ranks
        _release(engine.groups(rank), team)
        out.append(None)
    return out


def spawned_rank(rank: int, world_size: int, plan: PlanLike, opts: RunOptions) -> dict[str, Any]:
    """Entry of one process started by ``moeplan run``: init the group, run the plan."""
    from moeplan.runtime.spawn import init_distributed

    init_distributed(rank, world_size, timeout_s=opts.timeout_s)
    return run_rank(rank, world_size, plan, opts)
