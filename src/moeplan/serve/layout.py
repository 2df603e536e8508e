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

from dataclasses import dataclass, field

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
        object.__setattr__(self, "gpus", w * self.pp)

    @property
    def stage_gpus(self) -> int:
        """GPUs per pipeline stage (``attn_tp * attn_dp``)."""
        return self.attn_tp * self.attn_dp

    @property
    def label(self) -> str:
        s = f"attn TP{self.attn_tp}xDP{self.attn_dp} / MoE TP{self.moe_tp}xEP{self.moe_ep}"
        return s + (f" / PP{self.pp}x{self.micro_batches}mb" if self.pp > 1 else "")

    def to_dict(self) -> dict[str, int]:
        return {
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
                model.num_experts % self.moe_ep == 0,
                f"model.num_experts ({model.num_experts}) must be divisible by moe_ep ({self.moe_ep})",
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
                self.gpus <= cluster.num_gpus,
                f"layout gpus ({self.gpus}) must be <= cluster GPUs ({cluster.num_gpus})",
            ),
        )
        for ok, msg in rules:
            require(ok, msg)
        return self


def stage_layers(model: ModelSpec, pp: int) -> list[range]:
    """Decoder layers of each pipeline stage: contiguous, counts differing by at most one."""
    base, extra = divmod(model.num_layers, pp)
    out, start = [], 0
    for s in range(pp):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def stage_weight_bytes(
    model: ModelSpec, layout: ServeLayout, layers: range, first: bool, last: bool
) -> float:
    """Weights on one GPU of the stage holding ``layers``."""
    lay = layout
    ep_local = model.num_experts / lay.moe_ep
    total = 0.0
    for i in layers:
        total += mem.attn_weight_bytes(model, lay.attn_tp)
        if model.is_moe_layer(i):
            total += mem.expert_weight_bytes(model, ep_local, lay.moe_tp) + mem.shared_weight_bytes(
                model, lay.attn_tp
            )
        else:
            total += mem.dense_mlp_weight_bytes(model, lay.dense_tp)
    emb = mem.embedding_bytes(model, lay.attn_tp)
    share = (0.5 if first else 0.0) + (0.5 if last else 0.0)  # embedding first, lm-head last
    return total + emb * share


#: a stage of only linear layers has no per-token cache: its pool is bounded by this instead
MAX_POOL_TOKENS = 2**31 - 1


def _stages_free(
    model: ModelSpec, cluster: ClusterSpec, layout: ServeLayout, token_budget: int
) -> list[tuple[float, float, float]]:
    """Per pipeline stage: (bytes free for the cache on one GPU, cache bytes per token, fixed
    cache bytes per sequence) after weights, activations, buffers and the reserve."""
    lay = layout
    w = lay.stage_gpus
    out = []
    stages = stage_layers(model, lay.pp)
    for s, layers in enumerate(stages):
        weights = stage_weight_bytes(model, lay, layers, s == 0, s == lay.pp - 1)
        per_rank_tokens = -(-token_budget // lay.attn_dp)
        act = mem.activation_bytes(model, per_rank_tokens, lay.attn_tp)
        buffers = mem.a2a_buffer_bytes(model, -(-token_budget // w), model.top_k)
        free = cluster.gpu.mem_bytes - weights - act - buffers - mem.RESERVED_BYTES
        if free <= 0:
            need = (weights + act + buffers + mem.RESERVED_BYTES) / 1024**3
            raise MoeplanError(
                f"layout ({lay.label}) needs {need:.1f} GiB per GPU before any KV cache; "
                f"{cluster.gpu.name} has {cluster.gpu.mem_bytes / 1024**3:.1f} GiB"
            )
        per_token = sum(mem.kv_bytes_per_token_layer(model, lay.attn_tp, i) for i in layers)
        out.append((free, per_token, mem.fixed_bytes_per_seq(model, lay.attn_tp, layers)))
    return out


def kv_capacity_tokens(
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: ServeLayout,
    token_budget: int,
    seqs: int = 0,
) -> int:
    """KV tokens one attention-DP rank can hold (the tightest stage), after weights,
    activations of ``token_budget`` tokens, all-to-all buffers, the reserve and the
    length-independent cache of ``seqs`` running sequences per rank (linear layers' state,
    csa / hca windows: :func:`moeplan.cost.memory.fixed_bytes_per_seq`). A token costs each
    layer its kind's rate (:func:`moeplan.cost.memory.kv_bytes_per_token_layer`; linear
    layers nothing, compressed layers an entry per ratio tokens, windowed layers their full
    rate — the pool cannot know which tokens fall out of a window).

    Raises :class:`MoeplanError` when the weights (and the states) alone do not fit.
    """
    best = None
    for free, per_token, fixed in _stages_free(model, cluster, layout, token_budget):
        left = free - seqs * fixed
        if left <= 0:
            raise MoeplanError(
                f"layout ({layout.label}) cannot hold the state of {seqs} running sequences "
                f"per rank ({fixed * seqs / 1024**3:.1f} GiB) next to its weights on "
                f"{cluster.gpu.name}"
            )
        tokens = int(left // per_token) if per_token > 0 else MAX_POOL_TOKENS
        best = tokens if best is None else min(best, tokens)
    assert best is not None
    return best


def state_split(
    model: ModelSpec, cluster: ClusterSpec, layout: ServeLayout, token_budget: int,
    state_ratio: float,
) -> tuple[int, int]:  # fmt: skip
    """``(KV tokens, sequences)`` per rank when the cache memory is split as SGLang splits it
    for models with recurrent state: ``state_ratio / (1 + state_ratio)`` of it holds the
    sequences' fixed state, the rest the token pool (the tightest stage of each)."""
    tokens, seqs = None, None
    for free, per_token, fixed in _stages_free(model, cluster, layout, token_budget):
        states = free * state_ratio / (1 + state_ratio)
        n = int(states // fixed) if fixed > 0 else MAX_POOL_TOKENS
        t = int((free - states) // per_token) if per_token > 0 else MAX_POOL_TOKENS
        tokens = t if tokens is None else min(tokens, t)
        seqs = n if seqs is None else min(seqs, n)
    assert tokens is not None and seqs is not None
    return tokens, seqs
