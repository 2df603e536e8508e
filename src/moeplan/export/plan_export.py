"""Launch folders of a ``moeplan plan`` result: the whole deployment each engine can run.

Pure: the plan outcome (a :class:`moeplan.planners.rank.PlanResult` and, when simulated, the
serving ranking) in, file texts out (the report writes them under ``launch/``).

- Options are the serving ranking's deployments in its order (:func:`serving_options`:
  colocated layouts with their replicas, P/D pairs of pools), else the analytic ranking's
  colocated strategies and one-stage SMIDT plans with their replicas
  (:func:`analytic_options`). :func:`engine_export` exports, per engine, the first option
  whose every server the engine can express *and* that passes every rule of the pinned
  version (:mod:`moeplan.export.constraints`, :mod:`moeplan.export.launch_facts`); when that
  is not the plan's winner the script says which plan won, what it launches instead and the
  predicted gap per GPU.
- The option's pools are placed on GPUs, ports and nodes (:mod:`moeplan.export.deployment`),
  every server gets its engine command (:mod:`moeplan.export.launch_servers`: SGLang
  ``--base-gpu-id``, vLLM ``CUDA_VISIBLE_DEVICES``, a router in front of several servers) and
  one ``launch.sh`` / ``stop.sh`` start and stop them in order
  (:mod:`moeplan.export.launch_scripts`); ``deployment`` records what they start.
- Model path: ``--model-path`` of ``moeplan plan``, else the preset's Hugging Face repository
  (:data:`DEFAULT_MODEL_PATHS`) or the folder of a ``config.json``; never a preset name.
  ``--trust-remote-code`` when the checkpoint's config has ``auto_map``.
- A plan made on a truncated model (``--layers``) launches the full model: the script says so
  at the top and leaves out ``--init-expert-location`` (the placement covers only the layers
  that were planned).
- A Sem-MoE placement is passed to the SGLang servers (``--init-expert-location`` for the
  ``expert_location.json`` beside the script, ``--ep-num-redundant-experts`` when it
  replicates experts) whose EP size it was made for — the decode pool of a P/D deployment —
  and the script says which servers do not get it and why.
- A SMIDT pipeline's stage cuts go in as the engine's layer partition
  (:mod:`moeplan.export.pp_partition`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moeplan.backends import backend, exported
from moeplan.errors import MoeplanError, require, show
from moeplan.export import constraints as cons
from moeplan.export import k8s
from moeplan.export.deployment import Pool, Slot, place, summary
from moeplan.export.launch_scripts import render_launch, render_stop
from moeplan.export.launch_servers import router_command, server_commands
from moeplan.export.launcher import render_refusal
from moeplan.export.pp_partition import layer_partition
from moeplan.export.slot_args import location, pinned
from moeplan.planners.families import FAMILY
from moeplan.planners.layout import Layout
from moeplan.serve.deployment import PDLayout, engine_layout, of
from moeplan.specs import model_names
from moeplan.specs.presets import model_repos, preset_key

#: preset name -> the Hugging Face repo the launch scripts load (the one preset table)
DEFAULT_MODEL_PATHS = model_repos()


def model_path_for(model_arg: str, model_path: str | None) -> str:
    """What the launch scripts load: ``--model-path``, the preset's HF repo (or the repo name
    given as ``--model``), or the config's folder. A bare preset name is refused (no engine can load it)."""
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
    if "/" in model_arg and preset_key(model_arg) is not None and not p.exists():
        return model_arg  # a Hugging Face repo name of a preset: the engines load that repo
    if p.is_dir():
        return str(p.resolve())
    require(
        p.suffix == ".json", f"--model ({model_arg}) has no default model path; pass --model-path"
    )
    return str(p.resolve().parent)


def checkpoint_config(model_arg: str) -> dict[str, Any] | None:
    """The ``config.json`` dict of ``--model`` (a preset's shipped copy or the file), for the
    launch facts that depend on the checkpoint (:mod:`moeplan.export.launch_facts`)."""
    from moeplan.specs.presets import model_config

    p = Path(model_arg)
    if p.is_dir():
        p = p / "config.json"
    if p.suffix == ".json" and p.is_file():
        from moeplan.specs.hf_config import read_config_file

        cfg = read_config_file(p)
        return cfg if isinstance(cfg, dict) else None
    try:
        return model_config(model_arg)
    except MoeplanError:
        return None


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
    node_args: tuple[tuple[str, ...], ...] = ()  # the first server's command on every node it spans
    warnings: tuple[str, ...] = ()
    skipped: tuple[str, ...] = field(default_factory=tuple)  # better strategies it cannot run
    #: ``launch/<engine>/`` files (name -> text): ``launch.sh`` (= ``text``) and ``stop.sh``
    files: dict[str, str] = field(default_factory=dict)
    #: what the files start (:func:`moeplan.export.deployment.summary`), None for a refusal
    deployment: dict[str, Any] | None = None
    #: every server's engine command of every node it spans, in launch order
    servers: tuple[tuple[tuple[str, ...], ...], ...] = ()
    #: ``launch/k8s/<engine>.yaml`` (:mod:`moeplan.export.k8s`; None for a refusal)
    k8s: str | None = None
    #: ``launch/k8s/<engine>-dynamo.yaml``: the DynamoGraphDeployment (None: none written)
    dynamo: str | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "deployment": self.deployment,
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
    remote_code: bool = False  # the checkpoint ships its own code (launch_facts.needs_remote_code)
    gpu: Any = None  # the cluster's GPU record (GPUSpec): the engines' memory and graph rules
    mla: bool = False  # the model's attention is MLA (SGLang's prefill-graph reserve)
    #: the release asked of an engine (``--engine-version``; engine -> version): the flag
    #: spelling its launch files use where the engine's writer knows several
    versions: dict[str, str] = field(default_factory=dict)

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

    strategy: Layout | None
    label: str
    family: str
    per_gpu: float
    unit: str  # what ``per_gpu`` counts, e.g. "prompt tokens/s per GPU (batch prefill)"
    knobs: Any = None  # the instance knobs the serving simulation priced (InstanceKnobs)
    redundant: int = 0  # the layout's redundant experts (SGLang's EPLB places them)
    replicas: int = 1  # independent copies of ``strategy``, fed round-robin by a router
    pools: tuple[Pool, ...] = ()  # explicit pools (P/D); default: the replicas of ``strategy``
    pp_partition: tuple[int, ...] | None = None  # layers per pipeline stage (pp_partition.py)
    notes: tuple[str, ...] = ()  # said in the script when this option is launched
    #: the scheduler the serving simulation ran a colocated instance with (EngineConfig; None:
    #: the engine's defaults)
    engine: Any = None
    #: copies of the whole deployment that fill the cluster (the verdict's cluster fill); the
    #: launch folder starts every one
    fill: bool = False

    def deploy_pools(self) -> tuple[Pool, ...]:
        """What the launch folder starts for one copy (empty: nothing an engine launches)."""
        if self.pools or self.strategy is None:
            return self.pools
        e = self.engine
        pool = Pool(
            role="colocated",
            strategy=self.strategy,
            count=self.replicas,
            knobs=self.knobs,
            redundant=self.redundant,
            pp_partition=self.pp_partition,
            chunk=None if e is None else e.chunk_tokens,
            max_running=None if e is None else e.max_running,
            mem_fraction=None if e is None else e.mem_fraction,
        )
        return (pool,)

    def copies(self, cluster_gpus: int) -> int:
        """Copies of :meth:`deploy_pools` that fit ``cluster_gpus`` (1 unless :attr:`fill`)."""
        gpus = sum(p.count * p.strategy.world_size for p in self.deploy_pools())
        return max(1, cluster_gpus // gpus) if self.fill and gpus else 1


PREFILL_UNIT = "prompt tokens/s per GPU (batch prefill)"
SERVING_UNIT = "output tokens/s per GPU (serving simulation)"


def analytic_options(result: Any) -> list[Option]:
    """The strategy family's fitting strategies and a one-stage SMIDT plan launchable as
    replicas of a colocated layout (``launchable_as``), best prompt tokens/s per GPU first."""
    out: list[Option] = []
    w = result.workload
    for c in result.candidates:
        out += ANALYTIC_OPTIONS[c.family](c, w.batch * w.isl)
    gpus = {id(o): o.strategy.world_size * o.replicas for o in out if o.strategy}
    return sorted(out, key=lambda o: (-o.per_gpu, gpus[id(o)]))


def _launchable_options(c: Any, tokens: int) -> list[Option]:
    """A one-stage plan that is replicas of a colocated layout (pipeline/launchable.py)."""
    la = c.launchable_as
    if la is None:
        return []
    lay = Layout.from_plan_layout(la)
    return [Option(strategy=lay.instance(), label=c.label, family=c.family, per_gpu=c.per_gpu,
                   unit=PREFILL_UNIT, replicas=lay.replicas)]  # fmt: skip


def _strategy_options(c: Any, tokens: int) -> list[Option]:
    """Every strategy of MixServe's analysis that fits, by its prefill figure."""
    return [Option(strategy=r.strategy, label=r.strategy.label, family=c.family,
                   per_gpu=tokens / r.prefill.total_s / r.num_gpus, unit=PREFILL_UNIT)
            for r in c.detail.strategies]  # fmt: skip


#: What each proposed family offers the engines from its analytic plan, keyed by family
#: (:data:`moeplan.planners.families.PROPOSING_FAMILIES`); FinDEP's schedule is no engine's.
ANALYTIC_OPTIONS: dict[str, Callable[[Any, int], list[Option]]] = {
    "strategy": _strategy_options,
    "pipeline": _launchable_options,
    "dep": lambda c, tokens: [],
}


def _pd_pools(lay: Layout | PDLayout, result: Any) -> tuple[Pool, ...]:
    """Both pools of a P/D layout with the running cap and memory fraction each pool was
    simulated with (``result.setup``'s prefill and decode configurations) and the decode
    layout's redundant experts; none for a colocated layout (its replicas are the option's)
    or AFD decode (no engine launches it)."""
    d = of(lay)
    if FAMILY[d.visit(pd=lambda pd: pd.family, default=lambda _: "strategy")].launch != "pools":
        return ()
    setup = getattr(result, "setup", None)
    cfgs = {} if setup is None else {"prefill": setup.prefill_cfg, "decode": setup.decode_cfg}
    red = d.visit(pd=lambda pd: {"decode": getattr(pd.decode, "redundant_experts", 0)},
                  default=lambda _: {})  # fmt: skip
    out = []
    for p in d.pools():
        e = cfgs.get(p.role)
        out.append(Pool(role=p.role, strategy=p.layout, count=p.count, knobs=p.knobs,
                        chunk=p.chunk, redundant=red.get(p.role, 0),
                        max_running=None if e is None else e.max_running,
                        mem_fraction=None if e is None else e.mem_fraction))  # fmt: skip
    return tuple(out)


def serving_options(serving: Any) -> list[Option]:
    """Every simulated deployment of the serving ranking in its order (SLO-meeting first):
    a colocated layout with its replicas (a SMIDT pipeline by its dominant stage layout), or
    a P/D pair of pools; AFD decode is no engine's (strategy None, no pools)."""
    out = []
    for s in serving.ranked:
        m, lay = s.metrics, s.entry.layout
        if m is None:
            continue
        st = None
        if FAMILY[s.entry.family].serving == "instance":
            st = engine_layout(lay)  # type: ignore[arg-type]  # instance-served: a Layout
        part, notes = _partition(s.entry.plan, st)
        out.append(
            Option(
                strategy=st,
                label=s.entry.label
                if s.entry.label == s.entry.layout_label
                else f"{s.entry.label} ({s.entry.layout_label})",
                family=s.entry.family,
                per_gpu=m.output_tokens_per_s_per_gpu,
                unit=SERVING_UNIT,
                knobs=s.result.knobs,
                redundant=of(lay).redundant_experts,  # PD / AFD pools: none
                replicas=s.entry.replicas,
                pools=_pd_pools(lay, s.result),
                pp_partition=part,
                notes=tuple(notes),
                engine=s.result.engine,
                fill=True,
            )
        )
    return out


def _partition(plan: Any, st: Layout | None) -> tuple[tuple[int, ...] | None, list[str]]:
    """A SMIDT pipeline plan's cuts as the engines' layer partition (pp_partition.py); when a
    cut falls inside a layer and SMIDT's time-balanced layer-level baseline (same cost tables,
    whole layers) has the same PP degree, that priced partition is exported instead."""
    if st is None or st.pp <= 1 or plan is None or FAMILY[plan.family].layout != "stages":
        return None, []
    stages = plan.layout.get("stages") or []
    if len(stages) != st.pp:
        return None, []
    part, notes = layer_partition(stages, plan.details.get("stage_time_s"))
    base = (plan.baselines or {}).get("time_balanced")
    if notes and base and base.get("pp") == st.pp and base.get("stage_modules"):
        ends = [{"end_module": b} for _, b in base["stage_modules"]]
        part = layer_partition(ends)[0]
        ours = plan.predicted.get("throughput_tokens_per_s", 0.0)
        notes.append(
            f"exported instead: SMIDT's time-balanced layer-level partition {list(part)} on the "
            f"same cost tables, predicted {base['throughput_tokens_per_s']:,.0f} tokens/s "
            f"(whole cluster) against the module-level plan's {ours:,.0f}"
        )
    return part, notes


def _head(engine: str, result: Any, ctx: ExportContext) -> list[str]:
    """The comment lines every script of ``engine`` starts with."""
    b = backend(engine)
    head = [
        f"moeplan plan: {result.model.name} on {result.cluster.name}; {b.name} {b.flag_line} flags",
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
    """The launch folder of ``engine``: the first of ``options`` (best first) whose every
    server the engine can run under its pinned rules, all its replicas and pools placed
    (:mod:`moeplan.export.deployment`); ``winner`` is what the predicted gap is measured
    against (default: the first option)."""
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
    c = result.cluster
    for o in options:
        pools = o.deploy_pools()
        if not pools:
            continue
        try:
            slots, copies = _place_copies(o, c.gpus_per_node, c.num_nodes, c.nodes_per_domain)
        except MoeplanError as err:
            skipped.append(f"{o.label}: {err}")
            continue
        scs = [server_commands(engine, s, ctx) for s in slots]
        bad = [v for sc in scs for v in sc.violations]
        bad += [w for sc in scs if not sc.nodes for w in sc.warnings]
        if bad:
            skipped.append(f"{o.label}: " + "; ".join(dict.fromkeys(bad)))
            continue
        router, what = router_command(engine, scs)
        notes = list(dict.fromkeys([*o.notes, *(w for sc in scs for w in sc.warnings)]))
        gap = win.per_gpu / o.per_gpu if o.per_gpu > 0 else float("inf")
        b = backend(engine)
        pins = [pinned(b, sc.slot, ctx, location(sc.slot, ctx, [])) for sc in scs]
        dep = summary(slots, engine, router is not None, pins, copies)
        comments = _comments(head, win, o, gap, skipped, notes)
        comments += _deployment_lines(dep, what, c.num_nodes)
        text = render_launch(
            scs, router, num_nodes=c.num_nodes, comments=comments, literals=(ctx.model_path,)
        )
        objs, why = k8s.manifests(engine, scs, router, literals=(ctx.model_path,))
        k8s_head = [*head[:2], f"launches: {o.family} {o.label}", *_k8s_lines(engine, why)]
        dgd, no_dgd = k8s.dynamo(engine, scs, literals=(ctx.model_path,))
        k8s_head += [f"no DynamoGraphDeployment: {no_dgd}"] if no_dgd else []
        return LaunchExport(
            engine=engine,
            k8s=k8s.render(objs, k8s_head),
            dynamo=None
            if dgd is None
            else k8s.render([dgd], [*head[:2], *DYNAMO_HEAD, _files_line(engine)]),
            text=text,
            label=o.label,
            per_gpu=o.per_gpu,
            unit=o.unit,
            gap=gap,
            node_args=scs[0].server_args,
            warnings=tuple(notes),
            skipped=tuple(skipped),
            files={
                "launch.sh": text,
                "stop.sh": render_stop(head[:2]),
                **{name: body for sc in scs for name, body in sc.files},
            },
            deployment=dep,
            servers=tuple(sc.server_args for sc in scs),
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


def _place_copies(
    o: Option, gpus_per_node: int, num_nodes: int, nodes_per_domain: int = 1
) -> tuple[list[Slot], int]:
    """The option's servers placed, as many copies of its deployment as fill the cluster
    (:meth:`Option.copies`; fewer when that many do not place on whole nodes, or across the
    NVLink domains of ``nodes_per_domain`` nodes), and that count."""
    pools = o.deploy_pools()
    k = o.copies(gpus_per_node * num_nodes)
    while True:
        try:
            return place(
                pools * k,
                gpus_per_node=gpus_per_node,
                num_nodes=num_nodes,
                nodes_per_domain=nodes_per_domain,
            ), k
        except MoeplanError:
            if k == 1:
                raise
            k -= 1


def deployment_exports(result: Any, serving: Any, ctx: ExportContext) -> dict[str, LaunchExport]:
    """Each engine's launch folder for a plan outcome: ``result`` (the families' ranking) and
    ``serving`` (the serving ranking, None when not simulated) — in the serving ranking's
    order when there is one, else by the analytic prefill figure."""
    if serving is not None:
        options = serving_options(serving)
        winner = options[0] if options else None
    else:
        options = analytic_options(result)
        w = result.winner
        winner = Option(
            strategy=None, label=w.label, family=w.family, per_gpu=w.per_gpu, unit=PREFILL_UNIT
        )
    return {e: engine_export(e, result, ctx, options, winner) for e in exported()}


#: the head of ``launch/k8s/<engine>-dynamo.yaml``
DYNAMO_HEAD = (
    "a DynamoGraphDeployment (ai-dynamo/dynamo operator, nvidia.com/v1alpha1): a frontend and "
    "one service per pool running its servers' engine arguments (TensorRT-LLM's as its "
    "worker's own flags); pick the Dynamo release whose runtime image carries the pinned engine "
    "release and add its tag to the images",
)


def _files_line(engine: str) -> str:
    """What to create before the manifests: the ConfigMap of the launch folder's files."""
    return (
        f"create first: kubectl create configmap moeplan-{engine}-files "
        f"--from-file=launch/{engine}/ (the files the servers read, mounted at {k8s.MOUNT})"
    )


def _k8s_lines(engine: str, why: Sequence[str]) -> list[str]:
    """The head of ``launch/k8s/<engine>.yaml``: what to create first, or why it is empty."""
    if why:
        return [f"no manifests: {w}; run launch/{engine}/launch.sh instead" for w in why]
    return [
        _files_line(engine),
        f"P/D servers read their RDMA devices from: kubectl create configmap "
        f"{k8s.RDMA_CONFIGMAP} --from-literal=MOEPLAN_IB_DEVICE=mlx5_0 (your devices; the pods "
        "need the cluster's RDMA resources too)",
        "multi-node servers are LeaderWorkerSets: install kubernetes-sigs/lws first",
    ]


def _deployment_lines(dep: dict[str, Any], router: str, num_nodes: int) -> list[str]:
    """What the script starts, in words."""
    pools = "; ".join(
        f"{p['instances']} {role} server{'s' * (p['instances'] > 1)} of {p['layout']}"
        for role, p in dep["pools"].items()
    )
    k = dep.get("copies", 1)
    copies = f"{k} copies of the planned deployment (they fill the cluster): " if k > 1 else ""
    out = [f"starts {copies}{pools}: {dep['gpus']} GPUs in all; {router}"]
    if num_nodes > 1:
        out.append(
            f"run it on each of the {num_nodes} nodes with NODE_RANK set to 0..{num_nodes - 1} "
            f"and NODE_0_ADDR..NODE_{num_nodes - 1}_ADDR to the nodes' addresses"
        )
    out.append("stop.sh ends what this script started on its node")
    return out


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
