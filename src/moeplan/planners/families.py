"""The deployment families: one record each, the only place a family's name is switched on.

A family is a way to deploy a model that moeplan plans, serves, reports, exports and runs.
Its :class:`Family` record says what each layer does with it; the layers keep their own
code in tables keyed by family name, registered where the code lives (so the layers keep
their import direction), and a test checks every table covers exactly the families whose
record asks for it:

============  ==========================================================================
layer         table (keyed by family name)
============  ==========================================================================
planners      :data:`moeplan.planners.rank.ADAPTERS` — the analytic proposer (``proposer``)
serve         :data:`moeplan.search.ranking.family_layouts.ENTRIES` (``serving == "instance"``) and
              :data:`moeplan.search.disagg.rank.POOL_PLANS` (``serving == "pools"``)
report        :data:`moeplan.report.sections.FAMILY_SECTIONS` and
              :data:`moeplan.report.figures.BASELINES` — a proposer's section and baselines
export        :data:`moeplan.export.plan_export.ANALYTIC_OPTIONS` — what a proposer's plan
              offers the engines; P/D pools by the record's ``launch``
cli           :data:`moeplan.cli.serve.PLAN_LAYOUTS` — ``serve-sim --plan``'s reader
runtime       :data:`moeplan.runtime.engines.ENGINES` and ``moeplan.runtime.mesh``'s mesh
              builders — every family that writes its own ``plan.json`` (``plan_family``)
============  ==========================================================================

Pure data: no I/O, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.errors import require

SERVING_KINDS = ("instance", "pools", "")
LAYOUT_KINDS = ("colocated", "stages", "groups")
LAUNCH_KINDS = ("colocated", "pools", "")


@dataclass(frozen=True, kw_only=True, slots=True)
class Family:
    """One deployment family and what every layer does with it."""

    name: str
    title: str
    """What the family is, in the words the CLI and the report use."""
    plan_family: str
    """``plan.json``'s ``family`` of its deployments (P/D plans are written as ``strategy``,
    AFD decode as ``dep``)."""
    layout: str
    """How its ``plan.json`` layout reads: ``colocated`` (:class:`~moeplan.planners.layout.Layout`,
    ``attn``/``moe``/``pp``), ``stages`` (SMIDT's per-module stages), ``groups`` (``ag``+``eg``)."""
    proposer: str = ""
    """The paper whose analytic planner proposes it in ``moeplan plan`` ("": none)."""
    serving: str = ""
    """How the serving ranking serves it: ``instance`` (replicas of one engine instance),
    ``pools`` (prefill and decode pools), "" (not served; :attr:`not_served` says why)."""
    not_served: str = ""
    needs: str = ""
    """The family whose plan its pools are built on (pools only)."""
    decode: str = ""
    """What its decode pool is (pools only), in words."""
    launch: str = ""
    """How SGLang/vLLM launch it: ``colocated`` (one layout, replicas), ``pools`` (a prefill
    and a decode pool), "" (no engine launches it; the export says so)."""
    report_section: str = ""
    """Title of its section in the report ("": none of its own)."""

    def __post_init__(self) -> None:
        require(
            self.serving in SERVING_KINDS,
            f"family {self.name}.serving ({self.serving!r}) must be one of {SERVING_KINDS}",
        )
        require(
            self.layout in LAYOUT_KINDS,
            f"family {self.name}.layout ({self.layout!r}) must be one of {LAYOUT_KINDS}",
        )
        require(
            self.launch in LAUNCH_KINDS,
            f"family {self.name}.launch ({self.launch!r}) must be one of {LAUNCH_KINDS}",
        )
        require(
            bool(self.serving) or bool(self.not_served),
            f"family {self.name} is not served and must say why (not_served)",
        )
        require(
            (self.serving == "pools") == bool(self.needs),
            f"family {self.name}: pools (and only pools) name the family they need",
        )

    @property
    def colocated(self) -> bool:
        """Launched by SGLang/vLLM as one colocated TP/EP/DP layout."""
        return self.launch == "colocated"

    @property
    def disaggregated(self) -> bool:
        """Attention and experts (or prefill and decode) on different GPUs."""
        return self.layout == "groups" or self.serving == "pools"


_NOT_SERVED_DEP = (
    "its plan is a prefill batch schedule of disaggregated attention/expert GPUs, shown with "
    "its analytic figure and not ranked; its schedule serves decode under load as the "
    "attention-FFN disaggregated family (afd)"
)
_NOT_SERVED_EP = (
    "its plans are written for the runtime (attention DP, MoE EP); moeplan plan proposes "
    "the same layouts as strategy layouts"
)

#: Every family, in the order the CLI lists them.
REGISTRY: tuple[Family, ...] = (
    Family(
        name="strategy",
        title="colocated hybrid (MixServe)",
        plan_family="strategy",
        layout="colocated",
        proposer="MixServe",
        serving="instance",
        launch="colocated",
        report_section="Colocated hybrid (MixServe): strategies",
    ),
    Family(
        name="ep",
        title="expert parallel (attention DP, MoE EP)",
        plan_family="ep",
        layout="colocated",
        not_served=_NOT_SERVED_EP,
        launch="colocated",
    ),
    Family(
        name="pipeline",
        title="pipelined (SMIDT)",
        plan_family="pipeline",
        layout="stages",
        proposer="SMIDT",
        serving="instance",
        launch="colocated",
        report_section="Pipelined (SMIDT): stages",
    ),
    Family(
        name="dep",
        title="disaggregated (FinDEP)",
        plan_family="dep",
        layout="groups",
        proposer="FinDEP",
        not_served=_NOT_SERVED_DEP,
        report_section="Disaggregated (FinDEP): schedule",
    ),
    Family(
        name="pd",
        title="prefill/decode disaggregated (DistServe, SGLang/vLLM PD)",
        plan_family="strategy",
        layout="colocated",
        serving="pools",
        needs="strategy",
        decode="colocated",
        launch="pools",
    ),
    Family(
        name="afd",
        title="attention-FFN disaggregated decode (FinDEP schedule)",
        plan_family="dep",
        layout="groups",
        serving="pools",
        needs="dep",
        decode="attention-FFN disaggregated",
    ),
)
FAMILY: dict[str, Family] = {f.name: f for f in REGISTRY}

#: Families that write their own ``plan.json`` (``plan.family``).
PLAN_FAMILIES: tuple[str, ...] = tuple(f.name for f in REGISTRY if f.plan_family == f.name)
#: Families an analytic planner proposes (``moeplan plan --families``).
PROPOSED: tuple[str, ...] = tuple(f.name for f in REGISTRY if f.proposer)
#: Families served as prefill and decode pools.
POOLED: tuple[str, ...] = tuple(f.name for f in REGISTRY if f.serving == "pools")
#: Families served as replicas of one engine instance.
INSTANCE_SERVED: tuple[str, ...] = tuple(f.name for f in REGISTRY if f.serving == "instance")
#: What each family is, in words.
TITLES: dict[str, str] = {f.name: f.title for f in REGISTRY}


def family(name: str) -> Family:
    """The record of ``name``; one line naming the families otherwise."""
    require(name in FAMILY, f"family ({name!r}) must be one of {', '.join(FAMILY)}")
    return FAMILY[name]
