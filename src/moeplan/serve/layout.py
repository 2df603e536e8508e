"""ServeLayout: the parallel layout of one serving engine instance, and its memory budget.

A deployment is ``pp`` pipeline stages of ``W = attn_tp * attn_dp = moe_tp * moe_ep`` GPUs each
(MixServe's per-block grammar, §III-B; SMIDT's stages, §IV). Inside a stage, ranks are laid out
with the TP axis innermost (contiguous GPUs), so a TP group of ``t`` GPUs spans
``ceil(t / gpus_per_node)`` nodes and an EP group (strided by ``moe_tp``) spans every node the
stage spans. Dense layers are sharded ``dense_tp`` ways (default ``attn_tp``) and replicated
over the rest of the stage, as SGLang/vLLM do for the first dense layers of DeepSeek.

KV capacity (tokens) comes from :mod:`moeplan.cost.memory`: the GPU's memory minus the
weights of the worst stage, the activations of one forward pass of the engine's token budget,
the all-to-all buffers and ``RESERVED_BYTES``, divided by the KV bytes one token costs one
GPU of a stage (its layers only). With attention DP each DP rank has its own KV pool;
:func:`kv_capacity_tokens` returns the per-rank capacity (one request must fit in one rank).
Sliding-window layers are charged the full context (an over-estimate for GPT-OSS).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from moeplan.cost import memory as mem
from moeplan.errors import MoeplanError, require
from moeplan.specs import ClusterSpec, ModelSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeLayout:
    """Degrees of one engine instance. ``micro_batches`` only matters when ``pp > 1``."""

    attn_tp: int = 1
    attn_dp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1
    pp: int = 1
    micro_batches: int = 0  # 0: one micro-batch per stage (vLLM/SGLang's default for PP)
    dense_tp: int = 0  # 0: same as attn_tp
    #: extra expert replicas per MoE layer (EPLB's redundant experts, SGLang
    #: ``--ep-num-redundant-experts``): ``num_experts + redundant_experts`` physical experts
    #: split evenly over ``moe_ep``
    redundant_experts: int = 0
    #: MixServe's fused AR-A2A (Algorithms 1-2: AG-Dispatch, RS-Combine): MoE TP = one
    #: node's GPUs, EP = the stage's nodes, the inter-node rounds overlapped with the
    #: intra-node collectives (:mod:`moeplan.serve.fused`)
    fused: bool = False
    gpus: int = field(init=False)

    def __post_init__(self) -> None:
        for f in ("attn_tp", "attn_dp", "moe_tp", "moe_ep", "pp"):
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
            self.micro_batches >= 0, f"layout.micro_batches ({self.micro_batches}) must be >= 0"
        )
        if self.micro_batches == 0:
            object.__setattr__(self, "micro_batches", self.pp)
        require(
            self.dense_tp >= 0 and (self.dense_tp == 0 or w % self.dense_tp == 0),
            f"layout.dense_tp ({self.dense_tp}) must divide attn_tp*attn_dp ({w})",
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
    def label(self) -> str:
        s = f"attn TP{self.attn_tp}xDP{self.attn_dp} / MoE TP{self.moe_tp}xEP{self.moe_ep}"
        s += f"+R{self.redundant_experts}" if self.redundant_experts else ""
        s += " fused" if self.fused else ""
        return s + (f" / PP{self.pp}x{self.micro_batches}mb" if self.pp > 1 else "")

    def to_dict(self) -> dict[str, int]:
        extra: dict[str, int] = (
            {"redundant_experts": self.redundant_experts} if self.redundant_experts else {}
        )
        extra |= {"fused": True} if self.fused else {}
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

    def validate(self, model: ModelSpec, cluster: ClusterSpec) -> ServeLayout:
        """Raise :class:`MoeplanError` if ``model`` cannot be cut this way on ``cluster``."""
        rules = (
            (
                model.num_attention_heads % self.attn_tp == 0,
                f"model.num_attention_heads ({model.num_attention_heads}) must be divisible by "
                f"attn_tp ({self.attn_tp})",
            ),
            (
                (model.num_experts + self.redundant_experts) % self.moe_ep == 0,
                f"model.num_experts ({model.num_experts}) must be divisible by moe_ep ({self.moe_ep})"
                if not self.redundant_experts
                else f"--moe-ep ({self.moe_ep}) must divide num_experts + redundant experts "
                f"({model.num_experts} + {self.redundant_experts})",
            ),
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


def stage_layers(model: ModelSpec, pp: int) -> list[range]:
    """Decoder layers of each pipeline stage (:func:`moeplan.cost.memory.stage_layers`)."""
    return mem.stage_layers(model.num_layers, pp)


def stage_weight_bytes(
    model: ModelSpec, layout: ServeLayout, layers: range, first: bool, last: bool
) -> float:
    """Weights on one GPU of the stage holding ``layers`` (:func:`moeplan.cost.memory.stage_weights`)."""
    return mem.stage_weights(model, layout.memory_shape(model), layers, first, last)


def kv_capacity_tokens(
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: ServeLayout,
    token_budget: int,
    kv_scale: float = 1.0,
    seqs: int = 0,
) -> int:
    """KV tokens one attention-DP rank can hold (the tightest stage), after weights,
    activations of a step of ``token_budget`` tokens, all-to-all buffers, the reserve and
    the length-independent cache of ``seqs`` running sequences per rank (linear layers'
    state, csa / hca windows) — :func:`moeplan.cost.memory.kv_capacity`, the model the
    strategy planner's fit check uses too; ``kv_scale`` = the KV dtype's bytes per element
    over the model's. A token costs each layer its kind's rate.

    Raises :class:`MoeplanError` when the weights (and the states) alone do not fit.
    """
    lay = layout
    shape = replace(lay.memory_shape(model), kv_scale=kv_scale)
    tokens, need = mem.kv_capacity(model, shape, cluster.gpu.mem_bytes, token_budget, seqs)
    if tokens <= 0:
        raise MoeplanError(
            f"layout ({lay.label}) needs {need / 1024**3:.1f} GiB per GPU before any KV cache; "
            f"{cluster.gpu.name} has {cluster.gpu.mem_bytes / 1024**3:.1f} GiB"
        )
    return tokens


def state_split(
    model: ModelSpec, cluster: ClusterSpec, layout: ServeLayout, token_budget: int,
    state_ratio: float, kv_scale: float = 1.0,
) -> tuple[int, int]:  # fmt: skip
    """``(KV tokens, sequences)`` per rank with the cache memory split between the token pool
    and the sequences' recurrent state as SGLang splits it
    (:func:`moeplan.cost.memory.state_split`)."""
    shape = replace(layout.memory_shape(model), kv_scale=kv_scale)
    return mem.state_split(model, shape, cluster.gpu.mem_bytes, token_budget, state_ratio)
