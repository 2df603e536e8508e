"""Launch scripts of a ``moeplan plan`` result: the best strategy each engine can run.

Pure: a :class:`moeplan.planners.rank.PlanResult` in, script texts out (the report writes them).

- The exported strategy is the best colocated (MixServe) strategy, by prompt tokens/s per GPU,
  whose arguments the engine can express *and* that pass every rule of the pinned version in
  :mod:`moeplan.export.constraints`. When that is not the plan's winner the script says which
  plan won, which one it launches instead and the predicted gap per GPU.
- Model path: ``--model-path`` of ``moeplan plan``, else the preset's Hugging Face repository
  (:data:`DEFAULT_MODEL_PATHS`) or the folder of a ``config.json``; never a preset name.
- A plan made on a truncated model (``--layers``) launches the full model: the script says so
  at the top and leaves out ``--init-expert-location`` (the placement covers only the layers
  that were planned).
- A Sem-MoE placement is passed to SGLang (``--init-expert-location`` for the
  ``expert_location.json`` beside the script, ``--ep-num-redundant-experts`` when it replicates
  experts) only when it was made for the exported EP size; otherwise the script says why not.
- Multi-node: one script covering every node, selected by ``NODE_RANK``
  (:func:`moeplan.export.launcher.render_per_node`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moeplan.errors import require, show
from moeplan.export import constraints as cons
from moeplan.export.launcher import HERE, render_per_node, render_refusal
from moeplan.export.sglang import sglang_args
from moeplan.export.vllm import RAY_PORT, vllm_args
from moeplan.planners.strategy.space import Strategy
from moeplan.specs import model_names
from moeplan.specs.presets import model_repos

#: preset name -> the Hugging Face repo the launch scripts load (the one preset table)
DEFAULT_MODEL_PATHS = model_repos()


def model_path_for(model_arg: str, model_path: str | None) -> str:
    """What the launch scripts load: ``--model-path``, the preset's HF repo, or the config's
    folder. A bare preset name is refused (no engine can load it)."""
    if model_path is not None:
        require(model_path.strip() != "", "--model-path (empty) must name a repo or folder")
        require(
            "\x00" not in model_path,
            f"--model-path ({show(model_path)}) must not contain a NUL byte",
        )
        require(
            model_path not in model_names() or Path(model_path).is_dir(),
            f"--model-path ({show(model_path)}) is a moeplan preset name; give a Hugging Face "
            "repo id (org/name) or a local model folder",
        )
        return model_path
    if model_arg in DEFAULT_MODEL_PATHS:
        return DEFAULT_MODEL_PATHS[model_arg]
    p = Path(model_arg)
    if p.is_dir():
        return str(p.resolve())
    require(
        p.suffix == ".json", f"--model ({model_arg}) has no default model path; pass --model-path"
    )
    return str(p.resolve().parent)


def truncation_warning(planned_layers: int, full_layers: int) -> str | None:
    """The sentence for a plan made on the first ``planned_layers`` of ``full_layers``."""
    if planned_layers >= full_layers:
        return None
    return (
        f"planned on the first {planned_layers} of {full_layers} layers (--layers), but the "
        "launch scripts load the full model: its memory and speed differ from the plan"
    )


@dataclass(frozen=True, kw_only=True)
class LaunchExport:
    """One engine's launch script and what it launches."""

    engine: str
    text: str
    label: str | None = None
    per_gpu: float | None = None
    unit: str = ""
    gap: float | None = None  # winner's prompt tokens/s per GPU over the exported plan's
    node_args: tuple[tuple[str, ...], ...] = ()  # the engine command of every node rank
    warnings: tuple[str, ...] = ()
    skipped: tuple[str, ...] = field(default_factory=tuple)  # better strategies it cannot run

    def summary(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "strategy": self.label,
            "prompt_tokens_per_s_per_gpu": self.per_gpu,
            "winner_over_exported": self.gap,
            "warnings": list(self.warnings),
            "skipped": list(self.skipped),
        }


@dataclass(frozen=True, kw_only=True)
class ExportContext:
    """Everything the scripts depend on besides the strategy."""

    model_path: str
    target: cons.Target
    planned_layers: int
    full_layers: int
    placement_ep: int | None = None
    placement_width: int | None = None  # physical experts per layer of expert_location.json
    notes: tuple[str, ...] = ()  # said at the top of every script (e.g. the full model's fit)
    pricing: str = ""  # which engine's kernels priced the plan (moeplan.kernel_tables.pricing_line)

    @property
    def truncated(self) -> bool:
        return self.planned_layers < self.full_layers

    @property
    def redundant(self) -> int:
        w = self.placement_width
        return 0 if w is None else max(0, w - self.target.num_experts)


@dataclass(frozen=True, kw_only=True)
class Option:
    """A deployment an engine might launch (``strategy`` None: a reference it cannot, such as a
    disaggregated winner), with the figure it is ranked by."""

    strategy: Strategy | None
    label: str
    family: str
    per_gpu: float
    unit: str  # what ``per_gpu`` counts, e.g. "prompt tokens/s per GPU (batch prefill)"
    knobs: Any = None  # the instance knobs the serving simulation priced (InstanceKnobs)
    redundant: int = 0  # the layout's redundant experts (SGLang's EPLB places them)


PREFILL_UNIT = "prompt tokens/s per GPU (batch prefill)"
SERVING_UNIT = "output tokens/s per GPU (serving simulation)"


def analytic_options(result: Any) -> list[Option]:
    """The strategy family's fitting strategies, best prompt tokens/s per GPU first."""
    strat = next((c for c in result.candidates if c.family == "strategy"), None)
    if strat is None:
        return []
    w = result.workload
    rs = sorted(
        strat.detail.strategies,
        key=lambda r: (-w.batch * w.isl / r.prefill.total_s / r.num_gpus, r.num_gpus),
    )
    return [
        Option(
            strategy=r.strategy,
            label=r.strategy.label,
            family="strategy",
            per_gpu=w.batch * w.isl / r.prefill.total_s / r.num_gpus,
            unit=PREFILL_UNIT,
        )
        for r in rs
    ]


def serving_options(serving: Any) -> list[Option]:
    """Every simulated deployment of the serving ranking in its order (SLO-meeting first), as
    a colocated strategy of its layout (a SMIDT pipeline by its dominant stage layout); FinDEP
    is not among them (its serving is not simulated)."""
    out = []
    for s in serving.ranked:
        m, lay = s.metrics, s.entry.layout
        if m is None:
            continue
        st = None  # disaggregated pools are not one engine (export/sglang.py sglang_pd_commands)
        if s.entry.family not in ("pd", "afd"):
            st = Strategy(
                attn_tp=lay.attn_tp,
                attn_dp=lay.attn_dp,
                moe_tp=lay.moe_tp,
                moe_ep=lay.moe_ep,
                pp=lay.pp,
            )
        out.append(
            Option(
                strategy=st,
                label=f"{s.entry.label} ({lay.label})",
                family=s.entry.family,
                per_gpu=m.output_tokens_per_s_per_gpu,
                unit=SERVING_UNIT,
                knobs=s.result.knobs,
                redundant=getattr(lay, "redundant_experts", 0),  # PD / AFD pools: none
            )
        )
    return out


def _sglang_nodes(
    s: Any, ctx: ExportContext, nodes: int, notes: list[str], opt: Option | None = None
) -> list[list[list[str]]]:
    loc = None
    if ctx.placement_width is not None:
        if ctx.truncated:
            notes.append("expert_location.json covers only the planned layers; it is not passed")
        elif ctx.placement_ep != s.moe_ep:
            notes.append(
                f"expert_location.json was placed for EP{ctx.placement_ep}, this "
                f"strategy runs EP{s.moe_ep}; it is not passed"
            )
        else:
            loc = "${HERE}/expert_location.json"
    out = []
    for rank in range(nodes):
        r = sglang_args(
            s,
            model_path=ctx.model_path,
            target=ctx.target,
            num_nodes=nodes,
            node_rank=rank,
            expert_location=loc,
            redundant_experts=ctx.redundant if loc else (opt.redundant if opt else 0),
            knobs=opt.knobs if opt else None,
        )
        out.append([list(r.args)])
        if rank == 0:
            notes += r.warnings
    return out


def _vllm_nodes(
    s: Any, ctx: ExportContext, nodes: int, notes: list[str], opt: Option | None = None
) -> list[list[list[str]]] | None:
    out = []
    for rank in range(nodes):
        r = vllm_args(
            s,
            model_path=ctx.model_path,
            target=ctx.target,
            num_nodes=nodes,
            node_rank=rank,
            redundant_experts=max(ctx.redundant, opt.redundant if opt else 0),
            knobs=opt.knobs if opt else None,
        )
        if not r.expressible:
            notes += r.warnings
            return None
        if rank == 0:
            notes += r.warnings
        out.append([list(r.args)])
    if "--distributed-executor-backend" in out[0][0]:
        out[0].insert(0, ["ray", "start", "--head", "--port", str(RAY_PORT)])
    return out


def _violations(engine: str, cmds: list[list[list[str]]], s: Any, ctx: ExportContext) -> list[str]:
    bad: list[str] = []
    for rank, node in enumerate(cmds):
        args = node[-1]
        if engine == "sglang":
            loc = "--init-expert-location" in args
            bad += cons.check_sglang(
                args,
                ctx.target,
                gpus_used=s.world_size,
                location_width=ctx.placement_width if loc else None,
            )
        elif args[:1] == ["vllm"]:
            bad += cons.check_vllm(args, ctx.target, gpus_used=s.world_size, node_rank=rank)
    return bad


Builder = Callable[..., list[list[list[str]]] | None]
BUILDERS: dict[str, Builder] = {"sglang": _sglang_nodes, "vllm": _vllm_nodes}


def _head(engine: str, result: Any, ctx: ExportContext) -> list[str]:
    """The comment lines every script of ``engine`` starts with."""
    v = cons.PINNED[engine]
    head = [
        f"moeplan plan: {result.model.name} on {result.cluster.name}; {v.engine} {v.version} flags",
        f"model path: {ctx.model_path}",
    ]
    if ctx.pricing:
        head.append(ctx.pricing)
    trunc = truncation_warning(ctx.planned_layers, ctx.full_layers)
    if trunc:
        head.insert(0, f"WARNING: {trunc}")
    if not ctx.target.cuda:
        head.append(
            f"{ctx.target.gpu} is not a CUDA GPU: run the engine's NPU build "
            "(SGLang with sgl-kernel-npu, vLLM with the vllm-ascend plugin); the "
            "parallelism flags are the same"
        )
    return head + [f"WARNING: {n}" for n in ctx.notes]


def engine_export(
    engine: str,
    result: Any,
    ctx: ExportContext,
    options: Sequence[Option],
    winner: Option | None = None,
) -> LaunchExport:
    """The launch script of ``engine``: the first of ``options`` (best first) the engine can
    run under its pinned rules; ``winner`` is what the predicted gap is measured against
    (default: the first option)."""
    head = _head(engine, result, ctx)
    if not options:
        return LaunchExport(
            engine=engine,
            text=render_refusal(
                engine, head, "no colocated strategy was planned (strategy family skipped)"
            ),
        )
    win = winner or options[0]
    skipped: list[str] = []
    for o in options:
        if o.strategy is None:
            continue
        notes: list[str] = []
        cmds = BUILDERS[engine](o.strategy, ctx, result.cluster.num_nodes, notes, o)
        bad = [] if cmds is None else _violations(engine, cmds, o.strategy, ctx)
        if cmds is None or bad:
            skipped.append(f"{o.label}: " + "; ".join(bad or notes))
            continue
        gap = win.per_gpu / o.per_gpu if o.per_gpu > 0 else float("inf")
        comments = _comments(head, win, o, gap, skipped, notes)
        if len(cmds) > 1:
            comments.append(
                f"run this script on each of the {len(cmds)} nodes with NODE_RANK "
                f"set to 0..{len(cmds) - 1} and MASTER_ADDR to node 0's address"
            )
        return LaunchExport(
            engine=engine,
            text=render_per_node(cmds, comments, preamble=[HERE]),
            label=o.label,
            per_gpu=o.per_gpu,
            unit=o.unit,
            gap=gap,
            node_args=tuple(tuple(n[-1]) for n in cmds),
            warnings=tuple(notes),
            skipped=tuple(skipped),
        )
    return LaunchExport(
        engine=engine,
        skipped=tuple(skipped),
        text=render_refusal(
            engine,
            head + skipped,
            f"none of the {len(options)} planned deployments passes its rules",
        ),
    )


def _comments(
    head: Sequence[str],
    win: Option,
    o: Option,
    gap: float,
    skipped: Sequence[str],
    notes: Sequence[str],
) -> list[str]:
    out = [*head, f"launches: {o.family} {o.label}, predicted {o.per_gpu:,.1f} {o.unit}"]
    if win.label != o.label:
        out.append(
            f"the plan's winner is {win.family} {win.label} at {win.per_gpu:,.1f} "
            f"{win.unit}; this is the best deployment this engine can run, predicted "
            f"{gap:.2f}x slower per GPU"
        )
    if skipped:
        out.append(
            f"{len(skipped)} better deployments cannot be run by this engine, e.g. {skipped[0]}"
        )
    out += [f"WARNING: {n}" for n in notes]
    return out
