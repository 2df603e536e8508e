"""Run one plan on this rank: validate, build groups, pick the engine, check, record a trace.

:func:`prepare` is pure validation (same error on every rank, before any collective, so a bad
plan never hangs). :func:`run_rank` runs the engine of the plan's family on this rank:
``ep`` → :mod:`.engines.ep`; ``strategy`` → :mod:`.engines.hybrid`; ``dep`` →
:mod:`.engines.dep`; ``pipeline`` → :mod:`.engines.pp`. With ``check`` every rank also runs the
single-process reference on the same weights and inputs and reports its max abs error.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from moeplan.errors import MoeplanError, require
from moeplan.runtime.config import MoEConfig, from_model_spec
from moeplan.runtime.mesh import Mesh, mesh_from_plan, strategy_as_pipeline


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    """What to run: model (preset/config or an explicit ``config``), tokens, checks, trace."""

    model: str | None = None
    scale: str = "small"
    config: MoEConfig | None = None
    tokens: int = 64
    seq: int | None = None
    seed: int = 0
    check: bool = True
    fused: bool | None = None
    async_send: bool | None = None
    micro_batches: int | None = None
    timeout_s: float = 60.0
    trace: str | None = None
    warmup: int = 0
    weights: tuple[str, ...] = ()  # safetensors files; default: seeded random weights

    @property
    def seq_len(self) -> int:
        """``seq`` once :func:`resolve` has filled it (internal invariant)."""
        assert self.seq is not None, "resolve() fills seq"
        return self.seq

    def __post_init__(self) -> None:
        if self.seq is not None:
            require(self.seq >= 1, f"seq ({self.seq}) must be >= 1")
            require(self.tokens >= self.seq, f"tokens ({self.tokens}) must be >= seq ({self.seq})")


def resolve(plan: dict[str, Any], opts: RunOptions) -> RunOptions:
    """Fill ``seq`` from the plan's ``details.seq_len`` (FinDEP plans carry it), else 8."""
    if opts.seq is not None:
        return opts
    details = plan.get("details") if isinstance(plan, dict) else None
    seq = (details or {}).get("seq_len", 8)
    require(isinstance(seq, int) and seq >= 1, f"plan.details.seq_len ({seq!r}) must be >= 1")
    return replace(opts, seq=seq)


def model_config(plan: dict[str, Any], opts: RunOptions) -> MoEConfig:
    """The runtime config: explicit, else ``opts.model`` / ``plan.model`` through moeplan.specs."""
    if opts.config is not None:
        return opts.config
    name = opts.model or plan.get("model")
    if not name:
        return MoEConfig()
    try:
        from moeplan.specs import load_model
    except ImportError as err:
        if opts.model:
            raise MoeplanError(
                f"model ({name}) needs moeplan.specs, which is not available"
            ) from err
        return MoEConfig()
    return from_model_spec(load_model(name), opts.scale)


def prepare(plan: dict[str, Any], world_size: int, opts: RunOptions) -> tuple[Mesh, MoEConfig, int]:
    """Validate plan against the launch; returns (mesh, config, global batch in sequences)."""
    mesh = mesh_from_plan(plan, world_size)
    opts = resolve(plan, opts)
    cfg = model_config(plan, opts)
    require(opts.tokens >= opts.seq_len, f"tokens ({opts.tokens}) must be >= seq ({opts.seq_len})")
    batch = opts.tokens // opts.seq_len
    if mesh.family == "strategy" and mesh.pp > 1:  # PP across decoder layers: pipeline engine
        cfg = _with_layers(cfg, max(cfg.num_layers, mesh.pp), ())
        mesh = strategy_as_pipeline(mesh, cfg.num_layers)
    if mesh.family == "dep":
        from moeplan.runtime.engines.dep import DepParams, check_dep

        p = DepParams.from_mesh(mesh)
        check_dep(p, cfg, opts.seq_len)
        batch = p.ag * p.r1 * p.ma
    elif mesh.family == "pipeline":
        from moeplan.runtime.engines.pp import check_pipeline, dense_layers

        cfg = _with_layers(cfg, sum(len(s) for s in mesh.stages) // 2, dense_layers(mesh))
        check_pipeline(mesh, cfg)
    elif is_tp_ep(mesh):
        from moeplan.runtime.engines.tp_ep import TOKEN_PLANS

        kind = mesh.details.get("token_plan", "contiguous")
        require(
            kind in TOKEN_PLANS,
            f"plan.details.token_plan ({kind!r}) must be one of {', '.join(TOKEN_PLANS)}",
        )
        require(
            cfg.num_heads % mesh.attn_tp == 0 and cfg.num_experts % mesh.moe_ep == 0,
            f"model (num_heads {cfg.num_heads}, num_experts {cfg.num_experts}) must be "
            f"divisible by attn.tp = moe.ep ({mesh.attn_tp})",
        )
    elif mesh.family == "strategy":
        from moeplan.runtime.engines.hybrid import check_hybrid

        check_hybrid(mesh, cfg)
        require(batch >= mesh.attn_dp, f"tokens/seq ({batch}) must be >= attn.dp ({mesh.attn_dp})")
    else:
        from moeplan.runtime.placement import placements

        if placements(mesh.details, cfg.num_layers, cfg.num_experts, mesh.moe_ep) is None:
            require(
                cfg.num_experts % mesh.moe_ep == 0,
                f"model.num_experts ({cfg.num_experts}) must be divisible by ep ({mesh.moe_ep})",
            )
        require(batch >= mesh.attn_dp, f"tokens/seq ({batch}) must be >= attn.dp ({mesh.attn_dp})")
    return mesh, cfg, batch


def is_tp_ep(mesh: Mesh) -> bool:
    """Attention TP and MoE EP over the same ranks (Sem-MoE's attention-TP case)."""
    r = mesh.stage_size
    return (
        mesh.family == "strategy"
        and mesh.pp == 1
        and r > 1
        and mesh.attn_tp == r
        and mesh.moe_ep == r
    )


def _with_layers(cfg: MoEConfig, n: int, dense: tuple[int, ...]) -> MoEConfig:
    return MoEConfig(**{**asdict(cfg), "num_layers": n, "dense_layers": dense})


def _local_input(mesh: Mesh, rank: int, x: Any) -> Any:
    if mesh.family == "ep":
        return x.tensor_split(mesh.world_size)[rank]
    if is_tp_ep(mesh):
        return x
    if mesh.family == "strategy":
        return x.tensor_split(mesh.attn_dp)[mesh.coords(rank)["attn_dp"]]
    if mesh.family == "dep":
        return x.tensor_split(mesh.ag)[rank] if rank < mesh.ag else None
    return x if mesh.stage_of(rank) == 0 else None


def _execute(
    mesh: Mesh,
    cfg: MoEConfig,
    layers: list[Any],
    x: Any,
    opts: RunOptions,
    rank: int,
    tl: Any,
    shape: tuple[int, ...],
    extra: dict[str, Any],
) -> Any:
    from moeplan.runtime.groups import build_groups

    if mesh.family == "dep":
        from moeplan.runtime.engines import dep

        p = dep.DepParams.from_mesh(mesh)
        if rank < mesh.ag:
            return dep.run_dep_attention(x, layers, cfg, p, rank, tl)
        dep.run_dep_expert(layers, cfg, p, rank, tl)
        return None
    g = build_groups(mesh, rank)
    if mesh.family == "ep":
        from moeplan.runtime.engines.ep import run_ep
        from moeplan.runtime.placement import placements

        pl = placements(mesh.details, cfg.num_layers, cfg.num_experts, mesh.moe_ep)
        return run_ep(x, layers, cfg, g, tl, pl)
    if is_tp_ep(mesh):
        from moeplan.runtime.engines.tp_ep import run_tp_ep

        out, rows = run_tp_ep(x, layers, cfg, g, tl, mesh.details.get("token_plan", "contiguous"))
        extra["local_rows"] = rows
        return out
    if mesh.family == "strategy":
        from moeplan.runtime.engines.hybrid import run_hybrid

        fused = opts.fused if opts.fused is not None else bool(mesh.details.get("fused", True))
        return run_hybrid(x, layers, cfg, g, tl, fused=fused)
    from moeplan.runtime.engines.pp import run_pp

    micro = opts.micro_batches or mesh.details.get("microbatches") or mesh.pp
    async_send = (
        opts.async_send if opts.async_send is not None else bool(mesh.details.get("async_pp", True))
    )
    return run_pp(
        x,
        layers,
        cfg,
        mesh,
        g,
        tl,
        micro_batches=min(int(micro), shape[0]),
        shape=shape,
        async_send=async_send,
    )


def predicted_path(trace: str) -> str:
    """``out.json`` -> ``out.predicted.json`` (the simulator's timeline next to the measured)."""
    return trace[:-5] + ".predicted.json" if trace.endswith(".json") else trace + ".predicted.json"


def _write_traces(
    mesh: Mesh,
    cfg: MoEConfig,
    plan: dict[str, Any],
    opts: RunOptions,
    gathered: list[Any],
    link_s: float | None,
) -> dict[str, Any]:
    """Rank 0: merged measured trace, and for DEP the simulator's prediction beside it."""
    from moeplan.runtime.timeline import write_trace

    events = [e for ev, _ in gathered for e in ev]
    measured = max(w for _, w in gathered)
    info: dict[str, Any] = {"measured_makespan_s": measured}
    if not opts.trace:
        return info
    write_trace(
        events,
        opts.trace,
        family=mesh.family,
        plan_layout=plan.get("layout"),
        source="moeplan.runtime (measured)",
        otherData={"measured_makespan_s": measured},
    )
    info["trace"] = opts.trace
    if mesh.family == "dep" and link_s is not None:
        from moeplan.runtime.dep_predict import predicted_trace
        from moeplan.runtime.engines.dep import DepParams

        pred = predicted_trace(
            events, DepParams.from_mesh(mesh), cfg.num_layers, opts.seq_len, link_s, measured
        )
        if pred is not None:
            path = predicted_path(opts.trace)
            write_trace(pred.pop("traceEvents"), path, **pred)
            info.update(
                predicted_trace=path, predicted_makespan_s=pred["otherData"]["predicted_makespan_s"]
            )
    return info


def _calibrate(
    mesh: Mesh, cfg: MoEConfig, opts: RunOptions, rank: int, device: str
) -> float | None:
    if mesh.family != "dep" or not opts.trace:
        return None
    from moeplan.runtime.dep_predict import calibrate_link, chunk_rows
    from moeplan.runtime.engines.dep import DepParams

    p = DepParams.from_mesh(mesh)
    return calibrate_link(
        p, chunk_rows(p, opts.seq_len, cfg.top_k), cfg.hidden_size, rank, device=device
    )


def run_rank(rank: int, world_size: int, plan: dict[str, Any], opts: RunOptions) -> dict[str, Any]:
    """Run ``plan`` on this rank (process group already initialised); returns a JSON-able report."""
    import torch
    import torch.distributed as dist

    from moeplan.runtime.model import init_model, make_inputs, reference_forward, to_device
    from moeplan.runtime.timeline import Timeline

    opts = resolve(plan, opts)
    mesh, cfg, batch = prepare(plan, world_size, opts)
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    if opts.weights:
        from moeplan.runtime.model import load_safetensors

        layers = to_device(load_safetensors(list(opts.weights), cfg), device)
    else:
        layers = to_device(init_model(cfg, opts.seed), device)
    x = make_inputs(cfg, batch, opts.seq_len, opts.seed + 1).to(device)
    tl = Timeline(rank, torch.cuda.synchronize if cuda else None)
    extra: dict[str, Any] = {}
    with torch.no_grad():
        for _ in range(opts.warmup):  # first calls pay one-off allocation and dispatch costs
            _execute(
                mesh,
                cfg,
                layers,
                _local_input(mesh, rank, x),
                opts,
                rank,
                tl,
                tuple(x.shape),
                extra,
            )
    link_s = _calibrate(mesh, cfg, opts, rank, str(device))
    dist.barrier()
    tl.reset()
    start = time.perf_counter()
    with torch.no_grad():
        out = _execute(
            mesh, cfg, layers, _local_input(mesh, rank, x), opts, rank, tl, tuple(x.shape), extra
        )
    wall = time.perf_counter() - start
    err = None
    if opts.check and out is not None:
        with torch.no_grad():
            full = reference_forward(x, layers, cfg)
        ref = _local_input(mesh, rank, full) if mesh.family != "pipeline" else full
        err = float((out - ref).abs().max()) if out.numel() else 0.0
    gathered: list[Any] | None = [None] * world_size if rank == 0 else None
    dist.gather_object((tl.trace_events(), wall), gathered, dst=0)
    report = {
        "rank": rank,
        "role": mesh.role(rank),
        "max_abs_err": err,
        "wall_s": wall,
        "tokens": batch * opts.seq_len,
        "family": mesh.family,
        **extra,
    }
    if rank == 0:
        report.update(_write_traces(mesh, cfg, plan, opts, gathered, link_s))
    return report


def spawned_rank(
    rank: int, world_size: int, plan: dict[str, Any], opts: RunOptions
) -> dict[str, Any]:
    """Entry of one process started by ``moeplan run``: init the group, run the plan."""
    from moeplan.runtime.spawn import init_distributed

    init_distributed(rank, world_size, timeout_s=opts.timeout_s)
    return run_rank(rank, world_size, plan, opts)
