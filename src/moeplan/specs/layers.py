"""One decoder layer of a model: a token mixer and a feed-forward block (pure data).

A :class:`~moeplan.specs.model.ModelSpec` holds one :class:`LayerSpec` per decoder layer;
every derived total (parameters, FLOPs, KV-cache and recurrent-state bytes) is a sum over
them. The kind names below are the vocabulary the cost model keys on.

Mixer kinds (:data:`MIXER_KINDS`):

- ``mha``: full softmax attention, MHA / GQA / MQA (``num_kv_heads`` K and V heads).
- ``mla``: DeepSeek multi-head latent attention (caches ``kv_lora_rank + qk_rope_head_dim``).
- ``swa``: sliding-window attention over the last ``window`` tokens.
- ``chunked``: chunked local attention (Llama-4): a token sees the earlier tokens of its own
  ``chunk``-token chunk.
- ``dsa``: DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): MLA whose queries attend to the
  ``index_topk`` keys a lightning indexer (``index_n_heads`` x ``index_head_dim``) selects.
- ``csa`` / ``hca``: DeepSeek-V4 compressed sparse / heavily compressed attention: one
  compressed KV entry per ``compress_ratio`` tokens (``csa``: the indexer picks ``index_topk``
  entries; ``hca``: all entries), plus a ``window``-token uncompressed local branch.
- ``gdn``: Gated DeltaNet linear attention (Qwen3-Next / Qwen3.5); ``kda``: Kimi delta
  attention; ``mamba2``: Mamba-2 state-space mixer (Nemotron-H). No KV cache: a fixed
  recurrent state (and a short convolution window) per sequence.
- ``msa``: MiniMax-M3 block-sparse attention: GQA whose queries attend to ``topk_blocks``
  blocks of ``block_size`` keys picked by an index branch (``index_n_heads`` x
  ``index_head_dim`` keys cached beside K and V), plus ``local_blocks`` recent blocks.
- ``none``: no mixer (Nemotron-H's MoE-only and MLP-only blocks).

FFN kinds (:data:`FFN_KINDS`): ``dense`` (one MLP of ``intermediate_size``), ``moe``
(``num_experts`` routed experts, ``top_k`` per token, shared experts beside them), ``none``.
``gated``: three matrices (SwiGLU / GeGLU) or two (Nemotron's squared-ReLU).

Byte and FLOP formulas per kind live in :mod:`moeplan.specs.layer_math`.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.errors import MoeplanError, check_int, require, show
from moeplan.specs.limits import (
    MAX_CONTEXT,
    MAX_EXPERTS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_INTERMEDIATE,
)

MIXER_KINDS = (
    "mha", "mla", "swa", "chunked", "dsa", "csa", "hca", "gdn", "kda", "mamba2", "msa", "none",
)  # fmt: skip
#: mixers whose cache grows with the context (every other one keeps a fixed state)
ATTENTION_KINDS = ("mha", "mla", "swa", "chunked", "dsa", "csa", "hca", "msa")
#: mixers with a fixed recurrent state per sequence instead of a KV cache
LINEAR_KINDS = ("gdn", "kda", "mamba2")
#: mixers whose latent KV is one shared entry per token (not split by attention TP)
LATENT_KINDS = ("mla", "dsa", "csa", "hca")
FFN_KINDS = ("dense", "moe", "none")
#: router score functions (DeepSeek-V4 ``sqrtsoftplus``: sqrt(softplus(logits)); ``hash``:
#: DeepSeek-V4's first ``num_hash_layers`` route by token id, no learned scores)
ROUTER_FUNCS = ("softmax", "sigmoid", "sqrtsoftplus", "hash")

#: integer fields of :class:`Mixer` and their upper bounds (lower bound 0)
_MIXER_INTS = {
    "num_heads": MAX_HEADS, "num_kv_heads": MAX_HEADS, "head_dim": MAX_HEAD_DIM,
    "v_head_dim": MAX_HEAD_DIM, "q_lora_rank": MAX_HIDDEN, "kv_lora_rank": MAX_HIDDEN,
    "qk_nope_head_dim": MAX_HEAD_DIM, "qk_rope_head_dim": MAX_HEAD_DIM,
    "o_lora_rank": MAX_HIDDEN, "o_groups": MAX_HEADS, "window": MAX_CONTEXT,
    "chunk": MAX_CONTEXT, "index_topk": MAX_CONTEXT, "index_n_heads": MAX_HEADS,
    "index_head_dim": MAX_HEAD_DIM, "compress_ratio": MAX_CONTEXT,
    "lin_key_heads": MAX_HEADS, "lin_value_heads": MAX_HEADS, "lin_key_dim": MAX_HEAD_DIM,
    "lin_value_dim": MAX_HEAD_DIM, "conv_kernel": 64, "ssm_state": MAX_HEAD_DIM,
    "ssm_groups": MAX_HEADS, "block_size": MAX_CONTEXT, "topk_blocks": MAX_CONTEXT,
    "local_blocks": MAX_CONTEXT, "kv_bytes": 8, "state_bytes": 8,
}  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class Mixer:
    """The token mixer of one decoder layer; only the fields of its ``kind`` are used.

    Attention kinds: ``num_heads`` query heads, ``num_kv_heads`` K/V heads of ``head_dim``
    (query/key) and ``v_head_dim`` (value; 0 = ``head_dim``). MLA-based kinds: the latent
    ranks. Linear kinds: ``lin_*`` heads and dims (``gdn``/``kda``), or Mamba-2's
    ``num_heads`` x ``head_dim`` channels with an ``ssm_state``-wide state in ``ssm_groups``
    groups. ``kv_bytes`` / ``state_bytes``: bytes per cached value / recurrent-state value.
    """

    kind: str
    num_heads: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    # MLA family (mla, dsa, csa, hca)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    o_lora_rank: int = 0  # DeepSeek-V4 grouped low-rank output projection
    o_groups: int = 0
    # windows and sparse selection
    window: int = 0
    chunk: int = 0
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    compress_ratio: int = 0
    # linear attention (gdn, kda) and Mamba-2
    lin_key_heads: int = 0
    lin_value_heads: int = 0
    lin_key_dim: int = 0
    lin_value_dim: int = 0
    conv_kernel: int = 0
    ssm_state: int = 0
    ssm_groups: int = 0
    # MiniMax-M3 block-sparse attention
    block_size: int = 0
    topk_blocks: int = 0
    local_blocks: int = 0
    # projection details that change the parameter count
    bias: bool = False  # q/k/v biases
    out_bias: bool = False
    sinks: bool = False  # one learned sink logit per head (GPT-OSS, DeepSeek-V4)
    qk_norm: bool = False  # per-head RMSNorm of q and k
    output_gate: bool = False  # Qwen3.5 gated attention: q_proj also emits a gate
    k_eq_v: bool = False  # Gemma-4 full-attention layers: V is K (no v_proj)
    #: DeepSeek-V4: one cached vector per token serves as K and V (MQA over ``head_dim``),
    #: low-rank q and grouped low-rank output (csa / hca always; its window-only layers too)
    shared_kv: bool = False
    kv_bytes: int = 2  # bf16 cache unless the checkpoint states an fp8 KV cache
    state_bytes: int = 4  # recurrent state dtype (``mamba_ssm_dtype`` float32)

    def __post_init__(self) -> None:
        p = f"mixer[{self.kind}]"
        require(self.kind in MIXER_KINDS, f"{p}.kind ({show(self.kind)}) must be one of "
                f"{', '.join(MIXER_KINDS)}")  # fmt: skip
        for f, hi in _MIXER_INTS.items():
            check_int(f"{p}.{f}", getattr(self, f), 0, hi)
        need = _REQUIRED.get(self.kind, ())
        for f in need:
            require(getattr(self, f) > 0, f"{p}.{f} ({getattr(self, f)}) must be positive")
        if self.kind in ("mha", "swa", "chunked", "msa"):
            require(
                self.num_heads % self.num_kv_heads == 0,
                f"{p}.num_heads ({self.num_heads}) must be divisible by num_kv_heads "
                f"({self.num_kv_heads})",
            )

    @property
    def vo_dim(self) -> int:
        """Per-head value dimension."""
        return self.v_head_dim or self.head_dim

    @property
    def q_dim(self) -> int:
        """Per-head query/key dimension of the scores."""
        if self.kind in ("mla", "dsa"):
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def has_kv_cache(self) -> bool:
        return self.kind in ATTENTION_KINDS

    @property
    def is_linear(self) -> bool:
        return self.kind in LINEAR_KINDS


_GQA = ("num_heads", "num_kv_heads", "head_dim")
_MLA = ("num_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_V4 = ("num_heads", "num_kv_heads", "head_dim", "qk_rope_head_dim", "compress_ratio", "window")
_LIN = ("lin_key_heads", "lin_value_heads", "lin_key_dim", "lin_value_dim", "conv_kernel")
_REQUIRED: dict[str, tuple[str, ...]] = {
    "mha": _GQA,
    "swa": (*_GQA, "window"),
    "chunked": (*_GQA, "chunk"),
    "mla": _MLA,
    "dsa": (*_MLA, "index_topk", "index_n_heads", "index_head_dim"),
    "csa": (*_V4, "index_topk", "index_n_heads", "index_head_dim"),
    "hca": _V4,
    "gdn": _LIN,
    "kda": _LIN,
    "mamba2": ("num_heads", "head_dim", "ssm_state", "ssm_groups", "conv_kernel"),
    "msa": (*_GQA, "block_size", "topk_blocks", "index_n_heads", "index_head_dim"),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class FFN:
    """The feed-forward block of one decoder layer.

    ``dense``: one MLP of ``intermediate_size``. ``moe``: ``num_experts`` experts of
    ``intermediate_size``, ``top_k`` per token, routed by ``router`` scores (grouped routing:
    ``topk_group`` of ``n_group`` groups), plus shared experts of ``shared_intermediate_size``
    in total. ``gated``: 3 matrices per MLP (gate/up/down), else 2 (up/down).
    """

    kind: str
    intermediate_size: int = 0
    gated: bool = True
    bias: bool = False  # GPT-OSS expert biases
    num_experts: int = 0
    top_k: int = 0
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0
    shared_gate: bool = False  # Qwen2/3.5-MoE: a sigmoid gate on the shared expert
    router: str = "softmax"
    router_bias: bool = False  # e_score_correction_bias / GPT-OSS router bias
    n_group: int = 1
    topk_group: int = 1

    def __post_init__(self) -> None:
        p = f"ffn[{self.kind}]"
        require(
            self.kind in FFN_KINDS,
            f"{p}.kind ({show(self.kind)}) must be one of {', '.join(FFN_KINDS)}",
        )
        check_int(f"{p}.intermediate_size", self.intermediate_size, 0, MAX_INTERMEDIATE)
        check_int(
            f"{p}.shared_intermediate_size", self.shared_intermediate_size, 0, MAX_INTERMEDIATE
        )
        for f in ("num_experts", "top_k", "num_shared_experts", "n_group", "topk_group"):
            check_int(f"{p}.{f}", getattr(self, f), 0, MAX_EXPERTS)
        if self.kind == "none":
            return
        require(
            self.intermediate_size > 0,
            f"{p}.intermediate_size ({self.intermediate_size}) must be positive",
        )
        if self.kind == "moe":
            _check_moe(self, p)


def _check_moe(f: FFN, p: str) -> None:
    require(
        f.router in ROUTER_FUNCS,
        f"{p}.router ({show(f.router)}) must be one of {', '.join(ROUTER_FUNCS)}",
    )
    require(
        1 <= f.top_k <= f.num_experts,
        f"{p}.top_k ({f.top_k}) must be in [1, num_experts={f.num_experts}]",
    )
    require(
        f.n_group >= 1 and f.num_experts % f.n_group == 0,
        f"{p}.num_experts ({f.num_experts}) must be divisible by n_group ({f.n_group})",
    )
    require(
        1 <= f.topk_group <= f.n_group,
        f"{p}.topk_group ({f.topk_group}) must be in [1, n_group={f.n_group}]",
    )


MAX_HC_MULT = 64  # residual streams (DeepSeek-V4: 4)
MAX_HC_ITERS = 1000  # Sinkhorn steps (DeepSeek-V4: 20)


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerSpec:
    """One decoder layer: its mixer, its FFN and ``norms`` hidden-size norm vectors.

    ``hc_mult``: the residual streams of manifold-constrained hyper-connections (DeepSeek-V4's
    mHC: ``hc_mult`` copies of the hidden state, mixed into the mixer's and the FFN's input
    by a Sinkhorn-normalised matrix of ``hc_sinkhorn_iters`` steps and written back after
    each); 0: a plain residual."""

    mixer: Mixer
    ffn: FFN
    norms: int = 2
    hc_mult: int = 0
    hc_sinkhorn_iters: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.mixer, Mixer):  # checked before formatting (hot path)
            raise MoeplanError(f"layer.mixer ({show(self.mixer)}) must be a Mixer")
        if not isinstance(self.ffn, FFN):
            raise MoeplanError(f"layer.ffn ({show(self.ffn)}) must be an FFN")
        check_int("layer.norms", self.norms, 0, 16)
        check_int("layer.hc_mult", self.hc_mult, 0, MAX_HC_MULT)
        check_int("layer.hc_sinkhorn_iters", self.hc_sinkhorn_iters, 0, MAX_HC_ITERS)
        require(
            self.hc_mult > 0 or self.hc_sinkhorn_iters == 0,
            f"layer.hc_sinkhorn_iters ({self.hc_sinkhorn_iters}) needs hc_mult > 0",
        )
        require(
            self.mixer.kind != "none" or self.ffn.kind != "none",
            "layer has neither a mixer nor an FFN",
        )

    @property
    def kind(self) -> str:
        """``<mixer>+<ffn>``, e.g. ``gdn+moe``."""
        return f"{self.mixer.kind}+{self.ffn.kind}"

    @property
    def is_moe(self) -> bool:
        return self.ffn.kind == "moe"


@dataclass(frozen=True, kw_only=True, slots=True)
class Tower:
    """A non-language tower (vision / audio encoder and its projector): weights only.

    Loaded with the model (so counted in weight memory) but not served by moeplan: no
    FLOPs, no cache. ``params`` is an estimate from the tower's config (``source``)."""

    name: str
    params: int
    source: str

    def __post_init__(self) -> None:
        check_int(f"tower[{self.name}].params", self.params, 0, 10**12)
