"""Layout: the one parallel layout of an engine instance (and how many replicas of it run).

Every part of moeplan describes a colocated instance with this type: MixServe's strategy
grammar (:mod:`moeplan.planners.strategy.space`), the serving simulator
(:mod:`moeplan.serve.layout`), the exports and the runtime's rank arithmetic
(:mod:`moeplan.runtime.mesh`). Pure data and validation: no torch, no I/O.

An instance is ``pp`` pipeline stages of ``W = attn_tp * attn_dp = moe_tp * moe_ep`` GPUs
each (MixServe's per-block grammar, §III-B; SMIDT's stages, §IV). Inside a stage, ranks are
laid out with the TP axis innermost (contiguous GPUs), so a TP group of ``t`` GPUs spans
``ceil(t / nvlink_domain)`` NVLink domains (nodes, or NVL72 racks) and an EP group (strided by
``moe_tp``) spans every domain the stage spans. Dense layers are sharded ``dense_tp`` ways (default ``attn_tp``) and replicated
over the rest of the stage, as SGLang/vLLM do for the first dense layers of DeepSeek.
``replicas`` independent instances serve a deployment, each fed its share of the load.

One text form, :attr:`Layout.label` (also ``str(layout)``), is printed by the CLI, the report,
``--json`` outputs and the exports, e.g. ``attn TP4xDP2 / MoE TP8xEP1``,
``attn TP8xDP2 / MoE TP8xEP2 fused``, ``attn TP1xDP8 / MoE TP1xEP8+R32 / PP2x4mb x2 replicas``;
``serve-sim --pd`` reads the same text back (:mod:`moeplan.serve.deployment`).

Block-scaled weights (a checkpoint's ``weight_block_size``, e.g. 128 x 128 FP8 blocks) keep
one scale per block, so a TP shard must hold whole blocks: a module split ``t`` ways needs its
sharded dimension over ``t`` to be a multiple of the block (:func:`block_problems`). vLLM and
SGLang refuse anything else at load — ``validate_fp8_block_shape`` (``quantization/utils/
fp8_utils.py`` of both) and ``Fp8MoEMethod.create_weights`` (``quantization/fp8.py``):
"... is not divisible by weight quantization block_n / block_k" — e.g. Qwen3-235B-A22B-FP8's
experts (``moe_intermediate_size`` 1536) at MoE TP8 (192 per shard). Checked for the routed
experts (split ``moe_tp`` ways), the shared experts (``attn_tp``) and the dense MLPs
(``dense_tp``), whose intermediate dimension the split cuts (the gate/up projections' output,
``block_n``, and the down projection's input, ``block_k``); attention projections, whose
shards are whole heads, are not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from moeplan.cost import memory as mem
from moeplan.errors import MoeplanError, require
from moeplan.specs import ClusterSpec, ModelSpec

DEGREES = ("attn_tp", "attn_dp", "moe_tp", "moe_ep", "pp", "replicas")
#: The fields of :meth:`Layout.to_dict`'s flat form that :meth:`Layout.from_dict` reads (one
#: instance's: a flat form's ``replicas`` belong to whoever deploys it).
FLAT_FIELDS = (
    "attn_tp",
    "attn_dp",
    "moe_tp",
    "moe_ep",
    "pp",
    "micro_batches",
    "dense_tp",
    "redundant_experts",
    "fused",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """Degrees of one engine instance and its replica count (see module docstring).

    ``micro_batches`` only matters when ``pp > 1`` (0: one per stage, vLLM/SGLang's default
    for PP). ``dense_tp`` 0: same as ``attn_tp``.
    """

    attn_tp: int = 1
    attn_dp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1
    pp: int = 1
    micro_batches: int = 0
    dense_tp: int = 0
    #: extra expert replicas per MoE layer (EPLB's redundant experts, SGLang
    #: ``--ep-num-redundant-experts``): ``num_experts + redundant_experts`` physical experts
    #: split evenly over ``moe_ep``
    redundant_experts: int = 0
    #: MixServe's fused AR-A2A (Algorithms 1-2: AG-Dispatch, RS-Combine): MoE TP = one
    #: node's GPUs, EP = the stage's nodes, the inter-node rounds overlapped with the
    #: intra-node collectives (:mod:`moeplan.serve.iteration.fused`)
    fused: bool = False
    #: independent instances of this layout in the deployment
    replicas: int = 1
    gpus: int = field(init=False)
    """GPUs of one instance (``attn_tp * attn_dp * pp``)."""

    def __post_init__(self) -> None:
        for f in DEGREES:
            v = getattr(self, f)
            require(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                f"layout.{f} ({v!r}) must be a positive integer",
            )
        w = self.attn_tp * self.attn_dp
        require(
            self.moe_tp * self.moe_ep == w,
            f"layout moe_tp*moe_ep ({self.moe_tp}*{self.moe_ep}) must equal "
            f"attn_tp*attn_dp ({self.attn_tp}*{self.attn_dp})",
        )
        require(
            isinstance(self.micro_batches, int) and self.micro_batches >= 0,
            f"layout.micro_batches ({self.micro_batches!r}) must be an integer >= 0",
        )
        if self.micro_batches == 0:
            object.__setattr__(self, "micro_batches", self.pp)
        require(
            isinstance(self.dense_tp, int)
            and self.dense_tp >= 0
            and (self.dense_tp == 0 or w % self.dense_tp == 0),
            f"layout.dense_tp ({self.dense_tp!r}) must divide attn_tp*attn_dp ({w})",
        )
        if self.dense_tp == 0:
            object.__setattr__(self, "dense_tp", self.attn_tp)
        require(
            isinstance(self.redundant_experts, int) and self.redundant_experts >= 0,
            f"layout.redundant_experts ({self.redundant_experts!r}) must be an integer >= 0",
        )
        require(
            self.redundant_experts == 0 or self.moe_ep > 1,
            f"--redundant-experts ({self.redundant_experts}) needs moe_ep > 1",
        )
        require(
            isinstance(self.fused, bool) and (not self.fused or min(self.moe_tp, self.moe_ep) > 1),
            f"layout.fused ({self.fused!r}) needs moe_tp > 1 and moe_ep > 1 "
            f"(got moe_tp {self.moe_tp}, moe_ep {self.moe_ep})",
        )
        object.__setattr__(self, "gpus", w * self.pp)

    @property
    def stage_gpus(self) -> int:
        """GPUs per pipeline stage (``attn_tp * attn_dp``)."""
        return self.attn_tp * self.attn_dp

    @property
    def stage_size(self) -> int:
        """GPUs per pipeline stage (the strategy grammar's name for :attr:`stage_gpus`)."""
        return self.attn_tp * self.attn_dp

    @property
    def world_size(self) -> int:
        """GPUs of one instance: its ``torch.distributed`` world (``plan.layout.world_size``)."""
        return self.gpus

    @property
    def total_gpus(self) -> int:
        """GPUs of every replica together (``gpus * replicas``)."""
        return self.gpus * self.replicas

    @property
    def label(self) -> str:
        """The one text form, e.g. ``attn TP4xDP2 / MoE TP8xEP1 / PP2x2mb x2 replicas``:
        every field that differs from its default is written (dense TP only when it is not
        the attention TP, micro-batches whenever there is a pipeline or they are not ``pp``),
        so :func:`moeplan.serve.deployment.parse_layout` reads it back to this layout."""
        s = f"attn TP{self.attn_tp}xDP{self.attn_dp} / MoE TP{self.moe_tp}xEP{self.moe_ep}"
        s += f"+R{self.redundant_experts}" if self.redundant_experts else ""
        s += " fused" if self.fused else ""
        s += f" / dense TP{self.dense_tp}" if self.dense_tp != self.attn_tp else ""
        s += (
            f" / PP{self.pp}x{self.micro_batches}mb"
            if self.pp > 1 or self.micro_batches != self.pp
            else ""
        )
        return s + (f" x{self.replicas} replicas" if self.replicas > 1 else "")

    def __str__(self) -> str:
        return self.label

    def key(self) -> tuple[int, int, int, int, int, bool]:
        """``(attn_tp, attn_dp, moe_tp, moe_ep, pp, fused)``: the strategy grammar's point."""
        return (self.attn_tp, self.attn_dp, self.moe_tp, self.moe_ep, self.pp, self.fused)

    def instance(self) -> Layout:
        """This layout with one replica (what one engine instance runs)."""
        return self if self.replicas == 1 else replace(self, replicas=1)

    def to_dict(self) -> dict[str, int]:
        """Flat form of ``serve-sim``/``plan --json`` (``layout`` objects of the serving side)."""
        extra: dict[str, int] = (
            {"redundant_experts": self.redundant_experts} if self.redundant_experts else {}
        )
        extra |= {"fused": True} if self.fused else {}
        extra |= {"replicas": self.replicas} if self.replicas > 1 else {}
        return extra | {
            "attn_tp": self.attn_tp,
            "attn_dp": self.attn_dp,
            "moe_tp": self.moe_tp,
            "moe_ep": self.moe_ep,
            "pp": self.pp,
            "micro_batches": self.micro_batches,
            "dense_tp": self.dense_tp,
            "gpus": self.gpus,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Layout:
        """One instance of :meth:`to_dict`'s flat form (``gpus`` is derived, ``replicas`` not
        read; a field left out takes its default): ``serve-sim --plan``'s served layout and a
        P/D plan's pools."""
        return cls(**{k: d[k] for k in FLAT_FIELDS if k in d})

    def validate(self, model: ModelSpec, cluster: ClusterSpec) -> Layout:
        """Raise :class:`MoeplanError` if ``model`` cannot be cut this way on ``cluster``."""
        ep_rule = (
            f"model.num_experts ({model.num_experts}) must be divisible by moe_ep ({self.moe_ep})"
            if not self.redundant_experts
            else f"--moe-ep ({self.moe_ep}) must divide num_experts + redundant experts "
            f"({model.num_experts} + {self.redundant_experts})"
        )
        rules = (
            (
                model.num_attention_heads % self.attn_tp == 0,
                f"model.num_attention_heads ({model.num_attention_heads}) must be divisible by "
                f"attn_tp ({self.attn_tp})",
            ),
            ((model.num_experts + self.redundant_experts) % self.moe_ep == 0, ep_rule),
            (
                model.moe_intermediate_size % self.moe_tp == 0,
                f"model.moe_intermediate_size ({model.moe_intermediate_size}) must be divisible "
                f"by moe_tp ({self.moe_tp})",
            ),
            (
                self.pp <= model.num_layers,
                f"layout.pp ({self.pp}) must be <= model.num_layers ({model.num_layers})",
            ),
            (
                not self.fused
                or (
                    self.moe_tp == cluster.gpus_per_node
                    and self.stage_gpus == self.moe_ep * cluster.gpus_per_node
                ),
                f"layout.fused needs moe_tp ({self.moe_tp}) = GPUs per node "
                f"({cluster.gpus_per_node}) and one EP rank per node of the stage "
                f"(moe_ep {self.moe_ep})",
            ),
            (
                self.gpus <= cluster.num_gpus,
                f"layout gpus ({self.gpus}) must be <= cluster GPUs ({cluster.num_gpus})",
            ),
        )
        for ok, msg in rules:
            require(ok, msg)
        for msg in block_problems(model, self):
            raise MoeplanError(msg)
        return self

    def memory_shape(self, model: ModelSpec) -> mem.InstanceShape:
        """This layout as the memory model sees it (:class:`moeplan.cost.memory.InstanceShape`):
        experts per GPU (redundant ones included), ``top_k`` all-to-all copies per token."""
        return mem.InstanceShape(
            attn_tp=self.attn_tp,
            attn_dp=self.attn_dp,
            moe_tp=self.moe_tp,
            moe_ep=self.moe_ep,
            pp=self.pp,
            dense_tp=self.dense_tp,
            local_experts=(model.num_experts + self.redundant_experts) / self.moe_ep,
            k=model.top_k,
            fused=self.fused,
        )

    def plan_layout(self) -> dict[str, Any]:
        """``plan.json`` layout of the colocated families (docs/API.md): one instance's
        ``world_size``, ``attn``/``moe`` degrees and ``pp``; redundant experts when any."""
        out: dict[str, Any] = {
            "world_size": self.gpus,
            "attn": {"tp": self.attn_tp, "dp": self.attn_dp},
            "moe": {"tp": self.moe_tp, "ep": self.moe_ep},
            "pp": self.pp,
        }
        return out | (
            {"redundant_experts": self.redundant_experts} if self.redundant_experts else {}
        )

    @classmethod
    def from_plan_layout(cls, layout: Mapping[str, Any], where: str = "plan.layout") -> Layout:
        """Read a ``plan.json`` layout of a colocated family (or a pipeline plan's
        ``launchable_as``: ``world_size`` then counts every replica). One line naming the
        field on a bad value (:class:`MoeplanError`)."""
        attn, moe = layout_int_obj(layout, "attn", where), layout_int_obj(layout, "moe", where)
        pp = layout_int(layout, "pp", where) if "pp" in layout else 1
        reps = layout_int(layout, "replicas", where) if "replicas" in layout else 1
        a_tp, a_dp = (
            layout_int(attn, "tp", f"{where}.attn"),
            layout_int(attn, "dp", f"{where}.attn"),
        )
        m_tp, m_ep = layout_int(moe, "tp", f"{where}.moe"), layout_int(moe, "ep", f"{where}.moe")
        red = layout.get("redundant_experts", 0)
        if "world_size" in layout:
            world = layout_int(layout, "world_size", where)
            require(world % (pp * reps) == 0, f"{where}.pp ({pp}) must divide world_size ({world})")
            r = world // (pp * reps)
            require(
                a_tp * a_dp == r,
                f"{where}.attn tp*dp ({a_tp}*{a_dp}) must equal world_size/pp ({r})",
            )
            require(
                m_tp * m_ep == r,
                f"{where}.moe tp*ep ({m_tp}*{m_ep}) must equal world_size/pp ({r})",
            )
        try:
            return cls(
                attn_tp=a_tp,
                attn_dp=a_dp,
                moe_tp=m_tp,
                moe_ep=m_ep,
                pp=pp,
                replicas=reps,
                redundant_experts=red,
            )
        except MoeplanError as err:
            raise MoeplanError(f"{where}: {err}") from None


def layout_int(obj: Mapping[str, Any], key: str, where: str) -> int:
    """``obj[key]`` as a positive integer, or one line naming ``where.key``."""
    if not isinstance(obj, Mapping):
        raise MoeplanError(f"{where} ({type(obj).__name__}) must be a JSON object")
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise MoeplanError(f"{where}.{key} ({value!r}) must be a positive integer")
    return value


def layout_int_obj(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """``obj[key]`` as a JSON object, or one line naming ``where.key``."""
    if not isinstance(obj, Mapping):
        raise MoeplanError(f"{where} ({type(obj).__name__}) must be a JSON object")
    value = obj.get(key, {})
    if not isinstance(value, Mapping):
        raise MoeplanError(f"{where}.{key} ({type(value).__name__}) must be a JSON object")
    return value


def block_problems(model: ModelSpec, layout: Layout) -> list[str]:
    """The TP splits of ``layout`` that cut a block-scaled module of ``model`` inside a scale
    block (module docstring), one line each naming the rule."""
    q = model.quant
    modules = (
        ("experts", "moe_intermediate_size", model.moe_intermediate_size, layout.moe_tp, "moe_tp"),
        ("shared", "shared_intermediate_size", model.shared_intermediate_size, layout.attn_tp,
         "attn_tp"),
        ("dense", "dense_intermediate_size", model.dense_intermediate_size, layout.dense_tp,
         "dense_tp"),
    )  # fmt: skip
    out = []
    for module, field_name, size, t, degree in modules:
        block = getattr(q, module).format.block
        if not block or t <= 1 or size <= 0 or size % t:
            continue
        if module == "shared" and not model.num_shared_experts:
            continue
        if module == "dense" and not model.num_dense_layers:
            continue
        shard = size // t
        side = "block_n" if shard % block[0] else "block_k" if shard % block[1] else None
        if side is not None:
            out.append(
                f"model.{field_name} ({size}) / {degree} ({t}) = {shard} must be a multiple of "
                f"the checkpoint's weight block ({block[0]} x {block[1]}): each TP shard holds "
                "whole scale blocks (vLLM and SGLang refuse it at load: validate_fp8_block_shape,"
                f" 'not divisible by weight quantization {side}')"
            )
    return out
