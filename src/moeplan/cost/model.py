"""CostModel: one cost model under every planner (compute, attention, experts, collectives).

``CostModel(cluster, profile)`` answers "how long does this take on one GPU of this cluster":

- GEMMs through the profile's fitted model (:class:`Roofline` from measurements, or FinDEP's
  α-β over m·n·k). With no profile, a roofline from the GPU's datasheet numbers at 70 %
  of peak FLOP/s and 80 % of memory bandwidth with a 5 µs launch cost (the efficiencies the
  H100 fit finds: 748/989 TFLOP/s and 2.67/3.35 TB/s).
- Attention core (scores, softmax, values): the profile's α-β over
  ``q_tokens * keys * heads * (d_k + d_v)`` when it has one (FinDEP Eq. 8), else a roofline
  of its FLOPs (at half the GEMM rate: softmax and masking) against the KV-cache read.
- Grouped expert GEMMs: one launch for the local experts (as fused-MoE kernels do) for a
  roofline profile — compute and weight traffic add up over the experts the batch hits, the
  expected distinct experts of ``N`` tokens routed at random,
  ``E_local (1 - (1 - k / E)^N)`` (:func:`.kerneldb.load.experts_hit`; a decode batch of a
  few tokens reads a few experts' weights, not all); FinDEP's α-β profile keeps the paper's
  per-expert form ``3 (E/eg) t_gm(me M H)`` (Eq. 3).
- Quantized weights (``model.quant``): a roofline GEMM or grouped-expert
  GEMM reads its weight operand at the module's bytes per weight (scales included) and runs
  at its compute dtype's datasheet rate — the bf16 rate for weight-only methods, the fp8 /
  int8 rate (the GPU record's ``fp8_ratio`` / ``int8_ratio``, :mod:`moeplan.specs.gpu`) for fp8 and w8a8 — so a
  decode (weight-bound) GEMM's time scales with the stored bytes. Source: ``roofline`` (no
  measured quantized GEMM tables); FinDEP's α-β profile (``t(m n k)``) has no byte term and
  is unchanged. With an engine the fused-MoE query carries the experts' kernel dtype
  (``int4_wo`` / ``int8_wo`` / ``fp8`` / ``fp8_block`` / ``w4a16_mxfp4``), measured where the
  engine's tables have it, else ``transferred``.
- Collectives through :func:`moeplan.cost.collectives.collective_time`, with the profile's
  measured intra-node fits where they exist.
- Element-wise passes (a layer's fused residual-add RMSNorms, RoPE and QK-norm in an attention
  block priced from GEMMs, SwiGLU's activation beside GEMM-priced MLPs): their bytes at the
  GEMM model's memory rate (:meth:`CostModel.elementwise`, :mod:`moeplan.cost.elementwise`).

``CostModel(cluster, profile, engine="sglang" | "vllm" | "trtllm")`` prices the operations
whose kernels differ by engine from NVIDIA's measured kernel tables and the model that
transfers them (:mod:`moeplan.cost.kerneldb`, queries built by :mod:`.kerneldb.pricing`):
``expert_ffn`` (one fused-MoE call), ``attention_core`` (attention / MLA, prefill and
decode), ``attention_layer`` of DeepSeek-V3-shaped MLA models where the engine has module
tables (the whole block, projections included), ``mixer_layer`` of the layer kinds with their
own tables (DSA / CSA / HCA / MSA blocks, GDN / KDA / Mamba-2: :mod:`.mixers`; a block without
a mixer costs nothing; ``attention_layer`` without a layer index is then the mean over the
model's layers), intra-node ``all_reduce`` (the engine's
custom all-reduce; not on a full-mesh fabric such as Ascend HCCS, where the engines run
HCCL) and ``all_to_all`` over one 8-GPU node or whole 8-GPU nodes (DeepEP normal kernels; across nodes
transferred to the RDMA link, :func:`.kerneldb.comm.deepep_internode`). GEMMs, projections,
shared/dense MLPs, other collectives, other inter-node traffic, P2P and FinDEP's A2E keep the
paths above.
:meth:`CostModel.provenance` says, per operation, which sources priced it and their held-out
error. ``engine=None`` is exactly the model above. The database arrives as ``kernels=``
(:func:`moeplan.kernel_tables.kernel_db`, read once per process; or
:func:`moeplan.kernel_tables.engine_cost_model`): this module reads no files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property

import numpy as np

from moeplan.backends import backend
from moeplan.cost import elementwise as ew
from moeplan.cost.collectives import collective_time, is_mesh, pair_bandwidth
from moeplan.cost.kernel_fits import AttnShape, MoeShape
from moeplan.cost.kerneldb import TABLE_ENGINES, KernelDB, Prediction, device_for
from moeplan.cost.kerneldb.comm import deepep_internode
from moeplan.cost.kerneldb.families import DEEPEP_RANKS
from moeplan.cost.kerneldb.load import experts_hit
from moeplan.cost.kerneldb.pricing import (
    ALLREDUCE_GPUS,
    BF16_BYTES,
    all_to_all,
    attention_query,
    mla_module_query,
    moe_shape,
)
from moeplan.cost.linear import AlphaBeta, Roofline
from moeplan.cost.mixer_layers import MixerLayers
from moeplan.cost.mixers import MODULE_TABLE_KINDS
from moeplan.cost.prefetch import Prefetch
from moeplan.cost.price_keys import price_key
from moeplan.cost.profile import HardwareProfile
from moeplan.cost.wideep import WideEP
from moeplan.errors import MoeplanError
from moeplan.specs import ClusterSpec, ModelSpec
from moeplan.specs.quant import ModuleQuant

DEFAULT_ALPHA = 5e-6
DEFAULT_FLOPS_EFF = 0.70
DEFAULT_BW_EFF = 0.80
#: the one shape SGLang's wide-EP MLP tables measure (wideep_*_mlp_perf, 0.5.6.post2):
#: DeepSeek-V3's shared expert
WIDE_MLP_HIDDEN, WIDE_MLP_INTER = 7168, 2048
A2A_MEMO = 100_000  # memoised all-to-all predictions per CostModel


def _plain(w: ModuleQuant | None) -> bool:
    """bf16 weights and compute (the unquantized model's path)."""
    return w is None or (w.bytes_per_weight == BF16_BYTES and w.format.compute == "bf16")


class CostModel(MixerLayers, Prefetch):
    """Seconds per operation on one GPU of ``cluster`` (see module docstring)."""

    def __init__(
        self,
        cluster: ClusterSpec,
        profile: HardwareProfile | None = None,
        engine: str | None = None,
        kernels: KernelDB | None = None,
    ) -> None:
        self.cluster = cluster
        self.profile = profile
        self.engine = engine
        self._roof = Roofline(
            alpha=DEFAULT_ALPHA,
            flops=cluster.gpu.flops_bf16 * DEFAULT_FLOPS_EFF,
            bw=cluster.gpu.mem_bw * DEFAULT_BW_EFF,
        )
        self._kdb: KernelDB | None = None
        self._prov: dict[tuple[str, str], list] = {}
        # price accounting (moeplan.cost.price_sources): factor per price key, None: off
        self._scale: dict[tuple[str, str, str], float] | None = None
        self._seen: dict[tuple[str, str, str], Prediction] = {}
        self._kinds: dict[tuple, tuple] = {}  # decode-grid answers shared by the copies
        self._a2a: dict[tuple[float, int], Prediction | None] = {}
        self._groups: dict[int, tuple[object, list[tuple[int, int]] | None]] = {}
        self._views: dict[tuple[int, int], tuple[ModelSpec, ModelSpec]] = {}
        self._run_as: dict[int, tuple[ModelSpec, ModelSpec]] = {}
        if engine is not None:
            if engine not in TABLE_ENGINES:
                raise MoeplanError(f"engine ({engine!r}) must be one of {', '.join(TABLE_ENGINES)}")
            if kernels is None:  # the core reads no files: the I/O layer hands the tables in
                raise MoeplanError(
                    f"kernels (None) must be a KernelDB with engine ({engine!r}): pass "
                    "moeplan.kernel_tables.kernel_db() or use kernel_tables.engine_cost_model"
                )
            self._kdb = kernels
            self._device = kernels.held(device_for(cluster))

    def __repr__(self) -> str:
        eng = f", engine={self.engine}" if self.engine else ""
        return f"CostModel({self.cluster.name}, profile={self.profile_name}{eng})"

    # ---- kernel database ---------------------------------------------------------------
    def _kernel(self, op: str, shape: dict) -> float:
        assert self._kdb is not None and self.engine is not None
        p = self._kdb.predict(op, self._device, self.engine, **shape)
        return self._note(op, p)

    def lookup_counts(self) -> dict[tuple[str, str], tuple[int, float | None, float | None]]:
        """Kernel-table lookups so far per (operation, source), with the source's held-out
        median and p90 errors: what :meth:`provenance` reports."""
        return {k: (int(c[0]), c[1], c[2]) for k, c in self._prov.items()}

    def add_lookups(
        self, counts: dict[tuple[str, str], tuple[int, float | None, float | None]]
    ) -> None:
        """Add lookups made elsewhere (a copy of this model in a worker process, as
        :meth:`lookup_counts` gives them) to this model's."""
        for key, (n, med, p90) in counts.items():
            if n:
                self._prov.setdefault(key, [0, med, p90])[0] += n

    def _note(self, op: str, p: Prediction) -> float:
        """Count the lookup; the seconds to charge: ``p.seconds``, or in an accounting copy
        (:func:`moeplan.cost.price_sources.accounting_copy`) times its key's factor."""
        cell = self._prov.setdefault((op, p.source), [0, p.error, p.error_p90])
        cell[0] += 1
        if self._scale is None:
            return p.seconds
        key = price_key(op, p)
        self._seen.setdefault(key, p)
        return p.seconds * self._scale.get(key, 1.0)

    def _mla_module(
        self, model: ModelSpec, num_seqs: int, q_len: int, ctx_len: int, tp: int
    ) -> float | None:
        """The whole MLA block from the engine's module table (DeepSeek-V3-shaped models on
        a GPU whose reference has one), else ``None``. A prefix adds core time only."""
        if self._kdb is None or num_seqs <= 0 or q_len <= 0:
            return None
        q = mla_module_query(model, num_seqs, q_len, ctx_len, tp)
        if q is None or (self._device.reference, self.engine, q[0]) not in self._kdb.tables:
            return None
        op, shape = q
        t = self._kernel(op, shape)
        if q_len > 1 and ctx_len > q_len:  # decode rows already hold ctx (step = ctx - 1)
            t += self.attention_core(model, num_seqs, q_len, ctx_len, tp) - self.attention_core(
                model, num_seqs, q_len, q_len, tp
            )
        return t

    @cached_property
    def wide_ep(self) -> WideEP | None:
        """Wide-EP MoE layers (DeepEP + grouped GEMM, :mod:`moeplan.cost.wideep`) from the
        kernel database; ``None`` without an engine."""
        if self._kdb is None or self.engine is None:
            return None
        return WideEP(self._kdb, self._device, self.engine, self.cluster, self._note)

    def wide_mla(
        self, model: ModelSpec, num_seqs: int, q_len: int, ctx_len: int, kv_dtype: str
    ) -> float | None:
        """The MLA block of a wide-EP deployment (attention DP, fp8 projections) from the
        engine's ``wideep_*_mla`` tables (fp8 KV), or ``None`` (no table, not DeepSeek-V3's MLA
        shape). Decode rows hold the context in ``isl``; with a bf16 KV cache the extra KV
        bytes are read at the roofline's HBM rate (DEFAULT_BW_EFF of the datasheet). A model
        whose layers are sparse attention (DSA: DeepSeek-V3.2, GLM-5) runs the same sparse
        block under attention DP as under TP 1 — indexer over every key, MLA over the
        ``index_topk`` selected — so its price is :meth:`sparse_mixers` at TP 1, never the
        dense MLA tables."""
        if self._kdb is None or num_seqs <= 0 or q_len <= 0:
            return None
        sparse = self.sparse_mixers(model, num_seqs, q_len, ctx_len, 1, kv_dtype)
        if sparse is not None:
            return sparse
        q = mla_module_query(model, num_seqs, q_len, ctx_len, 1)
        op = "wideep_generation_mla" if q_len == 1 else "wideep_context_mla"
        if q is None or (self._device.reference, self.engine, op) not in self._kdb.tables:
            return None
        shape = dict(q[1], kv_cache_dtype="fp8", mla_dtype="fp8_block", gemm_type="fp8_block")
        if q_len == 1:
            shape.update(isl=max(1, ctx_len), step=0)
        t = self._kernel(op, shape)
        if q_len > 1 and ctx_len > q_len:
            t += self.attention_core(model, num_seqs, q_len, ctx_len) - self.attention_core(
                model, num_seqs, q_len, q_len
            )
        if kv_dtype == "bf16":
            extra = num_seqs * ctx_len * model.kv_bytes_per_token_layer() / 2
            t += extra / (self.cluster.gpu.mem_bw * DEFAULT_BW_EFF)
        return t

    def sparse_mixers(
        self, model: ModelSpec, num_seqs: int, q_len: int, ctx_len: int, tp: int, kv: str
    ) -> float | None:
        """The mean over the layers of :meth:`mixer_layer` (KV cache ``kv``) when every layer's
        mixer is a module-table sparse attention (DSA / CSA / HCA / MSA), else ``None``: the
        sparse block is priced from its own tables wherever the MLA / wide-EP paths would
        price a dense one."""
        specs = model.layer_specs
        if not specs or any(x.mixer.kind not in MODULE_TABLE_KINDS for x in specs):
            return None
        groups = self._mixer_groups(model) or [(0, len(specs))]
        total = 0.0
        for i, count in groups:
            t = self.mixer_layer(model, i, num_seqs, q_len, ctx_len, tp, kv)
            if t is None:
                return None
            total += count * t
        return total / len(specs)

    def wide_shared_expert(self, model: ModelSpec, tokens: float, decode: bool) -> float | None:
        """The shared expert of a wide-EP deployment (attention DP: every token of the rank,
        unsharded) from the engine's ``wideep_*_mlp`` tables — SGLang's DeepSeek-V3 MLP module
        in fp8_block, measured at the shared expert's shape only — or ``None`` (no table, or
        not that shape: hidden 7168, intermediate 2048, fp8 block weights)."""
        op = "wideep_generation_mlp" if decode else "wideep_context_mlp"
        if self._kdb is None or tokens <= 0 or model.shared_intermediate_size == 0:
            return None
        if (self._device.reference, self.engine, op) not in self._kdb.tables:
            return None
        q = model.quant.shared
        shape = (model.hidden_size, model.shared_intermediate_size, q.format.kernel_dtype)
        if shape != (WIDE_MLP_HIDDEN, WIDE_MLP_INTER, "fp8_block"):
            return None
        return self._kernel(
            op,
            {
                "num_tokens": tokens,
                "hidden_size": WIDE_MLP_HIDDEN,
                "inter_size": WIDE_MLP_INTER,
                "moe_dtype": "fp8_block",
            },
        )

    def provenance(self) -> dict[str, dict[str, dict[str, float | int | None]]]:
        """``{op: {source: {"calls", "error_median", "error_p90"}}}`` of every operation this
        model priced from the kernel database (empty without an engine)."""
        out: dict[str, dict[str, dict[str, float | int | None]]] = {}
        for (op, src), (n, med, p90) in sorted(self._prov.items()):
            out.setdefault(op, {})[src] = {"calls": n, "error_median": med, "error_p90": p90}
        return out

    @property
    def engine_version(self) -> str | None:
        """The engine release its kernel tables were chosen for (``--engine-version``; None:
        the newest table of each operation, and the engine's pinned release for its
        capabilities)."""
        asked = self._kdb.engine_version if self._kdb is not None else None
        return None if asked is None else asked[1]

    @property
    def profile_name(self) -> str:
        return self.profile.name if self.profile else "roofline(datasheet)"

    @cached_property
    def _gemm(self) -> Roofline | AlphaBeta:
        return self.profile.gemm if self.profile else self._roof

    # ---- compute ---------------------------------------------------------------------
    def compute_ratio(self, weight: ModuleQuant | None) -> float:
        """Tensor peak of ``weight``'s compute dtype over the bf16 peak on this GPU."""
        dtype = weight.format.compute if weight is not None else "bf16"
        g = self.cluster.gpu  # its record's rates (no record: the bf16 rate)
        ratio = {"fp8": g.fp8_ratio, "int8": g.int8_ratio}.get(dtype)
        return ratio or 1.0

    def gemm(self, m: float, n: float, k: float, weight: ModuleQuant | None = None) -> float:
        """GEMM ``[m, k] x [k, n]`` with bf16 activations; the ``[k, n]`` weight stored as
        ``weight`` (default bf16, see module docstring); zero for an empty operand."""
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        g = self._gemm
        if isinstance(g, AlphaBeta):
            return g(m * n * k)
        if _plain(weight):
            return g(m, n, k)
        return self._roof_gemm(g, m, n, k, 1.0, weight)

    def _roof_gemm(
        self, g: Roofline, m: float, n: float, k: float, groups: float, w: ModuleQuant | None
    ) -> float:
        padded = math.ceil(m / g.tile_m) * g.tile_m
        if w is None or _plain(w):  # bf16 weights: the roofline's own arithmetic, unchanged
            compute = 2.0 * padded * n * k * groups / g.flops
            memory = 2.0 * (m * k + k * n + m * n) * groups / g.bw
        else:
            compute = 2.0 * padded * n * k * groups / (g.flops * self.compute_ratio(w))
            memory = (BF16_BYTES * (m * k + m * n) + w.bytes_per_weight * k * n) * groups / g.bw
        return g.alpha + max(compute, memory)

    def grouped_gemm(
        self, m: float, n: float, k: float, groups: float, weight: ModuleQuant | None = None
    ) -> float:
        """``groups`` GEMMs of ``[m, k] x [k, n]`` with different weights, one launch."""
        if groups <= 0 or m <= 0:
            return 0.0
        g = self._gemm
        if isinstance(g, AlphaBeta):
            return groups * g(m * n * k)
        return self._roof_gemm(g, m, n, k, groups, weight)

    def attention_core(
        self,
        model: ModelSpec,
        num_seqs: int,
        q_len: int,
        ctx_len: int,
        tp: int = 1,
        layer: int | None = None,
    ) -> float:
        """Scores + softmax + values for ``num_seqs`` sequences of ``q_len`` new tokens
        attending (causally) to ``ctx_len`` keys in total, heads split ``tp`` ways."""
        if num_seqs <= 0 or q_len <= 0:
            return 0.0
        model = self.layer_model(model, layer)  # this layer's heads and head dim
        if self._kdb is not None:
            sliding = layer is not None and model.is_sliding_layer(layer)
            queries = attention_query(model, num_seqs, q_len, max(ctx_len, q_len), tp, sliding)
            return max(self._kernel(op, shape) for op, shape in queries)
        keys = ctx_len - (q_len - 1) / 2.0  # mean keys per query under the causal mask
        if layer is not None and model.is_sliding_layer(layer):
            keys = min(keys, model.sliding_window)
        heads = max(1.0, model.num_attention_heads / tp)
        fits = self.profile.kernels if self.profile is not None else None
        if fits is not None and (fits.decode if q_len <= 1 else fits.prefill) is not None:
            return self._fitted_attention(model, num_seqs, q_len, keys, tp)
        macs = num_seqs * q_len * keys * heads * (model.q_dim + model.vo_dim)
        if self.profile is not None and self.profile.attention is not None:
            return self.profile.attention(macs)
        roof = self._gemm if isinstance(self._gemm, Roofline) else self._roof
        cached = ctx_len  # keys read: a sliding / chunked layer reads its window only
        if layer is not None and model.is_sliding_layer(layer):
            cached = min(ctx_len, model.sliding_window)
        kv_read = (
            num_seqs
            * cached
            * model.kv_bytes_per_token_layer(layer)
            / (1 if model.attention == "mla" else min(tp, model.num_kv_heads))
        )
        return roof.alpha + max(2.0 * macs / (0.5 * roof.flops), kv_read / roof.bw)

    def decode_core_prices(
        self,
        model: ModelSpec,
        num_seqs: int,
        ctxs: Sequence[int],
        tp: int = 1,
        layer: int | None = None,
    ) -> list[float]:
        """:meth:`attention_core` of one decode token at each context of ``ctxs`` (one
        vectorised kernel-table query; not counted in the pricing provenance)."""
        if self._kdb is None or num_seqs <= 0:
            return [self.attention_core(model, num_seqs, 1, c, tp, layer) for c in ctxs]
        model = self.layer_model(model, layer)
        sliding = layer is not None and model.is_sliding_layer(layer)
        ((op, shape),) = attention_query(model, num_seqs, 1, 1, tp, sliding)  # the decode row
        n = len(ctxs)
        cols = {k: [v] * n for k, v in shape.items()}
        cols["step"] = [max(0, c - 1) for c in ctxs]
        assert self.engine is not None
        arrays = {k: np.asarray(v) for k, v in cols.items()}
        if self._scale is not None:  # an accounting copy: every row's price key counts
            key = (op, tuple((k, tuple(v)) for k, v in sorted(cols.items())))
            got = self._kinds.get(key)
            if got is None:  # the copies of one accounting share the unscaled answers
                got = self._kinds[key] = self._kdb.kinds_many(op, self._device, self.engine, arrays)
            secs, kinds = got
            for mask, p in kinds:
                pk = price_key(op, p)
                self._seen.setdefault(pk, p)
                f = self._scale.get(pk)
                if f is not None:
                    secs = np.where(mask, secs * f, secs)
            return secs.tolist()
        return self._kdb.seconds_many(op, self._device, self.engine, arrays).tolist()

    def decode_core_floors(
        self,
        model: ModelSpec,
        num_seqs: int,
        ctxs: Sequence[int],
        tp: int = 1,
        layer: int | None = None,
    ) -> list[float] | None:
        """A lower bound of each :meth:`decode_core_prices` at ``ctxs`` (the kernel tables'
        model and datasheet floor, :meth:`KernelDB.floor_many`), or ``None`` where none is
        kept: without kernel tables, and in an accounting copy (every priced row's key
        counts there, so every row is priced)."""
        if self._kdb is None or num_seqs <= 0 or self._scale is not None:
            return None
        model = self.layer_model(model, layer)
        sliding = layer is not None and model.is_sliding_layer(layer)
        ((op, shape),) = attention_query(model, num_seqs, 1, 1, tp, sliding)  # the decode row
        n = len(ctxs)
        arrays = {k: np.asarray([v] * n) for k, v in shape.items()}
        arrays["step"] = np.asarray([max(0, c - 1) for c in ctxs])
        assert self.engine is not None
        return self._kdb.floor_many(op, self._device, self.engine, arrays).tolist()

    def decode_core_blocks(
        self,
        model: ModelSpec,
        num_seqs: int,
        blocks: Sequence[tuple[int, ...]],
        tp: int = 1,
        layer: int | None = None,
    ) -> list[list[float]]:
        """:meth:`decode_core_prices` of each block of contexts in ``blocks``, all priced in
        one query (a row's price does not depend on the rows sharing its query:
        :mod:`moeplan.cost.prefetch`)."""
        flat = self.decode_core_prices(model, num_seqs, [c for b in blocks for c in b], tp, layer)
        out, i = [], 0
        for b in blocks:
            out.append(flat[i : i + len(b)])
            i += len(b)
        return out

    def _fitted_attention(
        self, model: ModelSpec, seqs: int, q_len: int, keys: float, tp: int
    ) -> float:
        """The profile's own kernel fits (:mod:`moeplan.cost.kernel_fits`); a sliding window
        shortens the context as ``keys`` says."""
        fits = self.profile.kernels  # type: ignore[union-attr]
        kv_split = 1 if model.attention == "mla" else min(tp, model.num_kv_heads)
        shape = AttnShape(
            seqs=seqs,
            q_len=q_len,
            ctx=keys + (q_len - 1) / 2.0,  # the keys of the last query (window-capped)
            heads=max(1.0, model.num_attention_heads / tp),
            kv_heads=max(1.0, model.num_kv_heads / tp),
            qk_dim=model.q_dim,
            v_dim=model.vo_dim,
            kv_bytes_per_token=model.kv_bytes_per_token_layer() / kv_split,
        )
        fit = fits.decode if q_len <= 1 else fits.prefill  # type: ignore[union-attr]
        return fit(shape)  # type: ignore[misc]

    def attention_layer(
        self,
        model: ModelSpec,
        num_seqs: int,
        q_len: int,
        ctx_len: int,
        tp: int = 1,
        layer: int | None = None,
        hc: bool = True,
    ) -> float:
        """One attention layer (projections + core) on one TP rank: layer ``layer``'s mixer
        (:meth:`mixer_layer`), or without a layer the mean over the model's layers when
        their mixers differ (``num_layers`` times it is the model's sum); with ``hc`` plus
        the layer's hyper-connections (:meth:`hyper_connections`, 0 for most models) for
        the rank's ``num_seqs x q_len`` tokens."""
        t = self._attention_block(model, num_seqs, q_len, ctx_len, tp, layer)
        return t + (self.hyper_connections(model, num_seqs * q_len, layer) if hc else 0.0)

    def _attention_block(
        self, model: ModelSpec, num_seqs: int, q_len: int, ctx_len: int, tp: int,
        layer: int | None,
    ) -> float:  # fmt: skip
        if layer is not None:
            mixed = self.mixer_layer(model, layer, num_seqs, q_len, ctx_len, tp)
            if mixed is not None:
                return mixed
        elif self.mixes_kinds(model) and (groups := self._mixer_groups(model)) is not None:
            n = model.num_layers
            return sum(
                count / n * self._attention_block(model, num_seqs, q_len, ctx_len, tp, i)
                for i, count in groups
            )
        model = self.layer_model(model, layer)  # this layer's heads and head dim
        module = self._mla_module(model, num_seqs, q_len, ctx_len, tp)
        if module is not None:
            return module
        t = num_seqs * q_len
        h, nh = model.hidden_size, model.num_attention_heads / tp
        w = model.quant.attention

        def gemm(m: float, n: float, k: float) -> float:
            return self.gemm(m, n, k, w)

        if model.attention == "mla":
            proj = (
                gemm(t, model.kv_lora_rank + model.qk_rope_head_dim, h)
                + gemm(t, nh * (model.qk_nope_head_dim + model.v_head_dim), model.kv_lora_rank)
                + gemm(t, h, nh * model.v_head_dim)
            )
            if model.q_lora_rank:
                proj += gemm(t, model.q_lora_rank, h) + gemm(t, nh * model.q_dim, model.q_lora_rank)
            else:
                proj += gemm(t, nh * model.q_dim, h)
        else:
            kv = max(1.0, model.num_kv_heads / tp)
            proj = gemm(t, (nh + 2 * kv) * model.head_dim, h) + gemm(t, h, nh * model.head_dim)
        proj += self.elementwise(t * ew.attention_bytes(model, tp))  # RoPE, QK-norm
        return proj + self.attention_core(model, num_seqs, q_len, ctx_len, tp, layer)

    def runs(self, model: ModelSpec) -> ModelSpec:
        """``model`` with its routed experts as the engine runs them on this GPU
        (:meth:`moeplan.backends.EngineBackend.moe_format`: NVFP4 experts without FP4 tensor
        cores run the engine's weight-only fallback, same bytes, bf16 compute, priced from
        the fallback's tables); ``model`` itself without an engine or where nothing changes."""
        if self.engine is None:
            return model
        hit = self._run_as.get(id(model))
        if hit is not None and hit[0] is model:
            return hit[1]
        q = model.quant.experts
        fmt = backend(self.engine).moe_format(q.format, self.cluster.gpu)
        out = model
        if fmt != q.format:
            mq = ModuleQuant(bytes_per_weight=q.bytes_per_weight, format=fmt)
            out = replace(model, quant=replace(model.quant, experts=mq))
        self._run_as[id(model)] = (model, out)
        return out

    def expert_ffn(
        self, model: ModelSpec, tokens_per_expert: float, num_local_experts: float, tp: int = 1
    ) -> float:
        """SwiGLU routed experts on one GPU: gate+up then down, each expert ``tokens_per_expert``."""
        model = self.runs(model)
        if self._kdb is not None:
            shape = moe_shape(model, tokens_per_expert, num_local_experts, tp)
            if shape is not None:
                return self._kernel("moe", shape)
        fits = self.profile.kernels if self.profile is not None else None
        if fits is not None and fits.moe is not None and tokens_per_expert > 0:
            k, e = model.top_k, model.num_experts
            return fits.moe(
                MoeShape(
                    tokens=tokens_per_expert * e / k,
                    hidden=model.hidden_size,
                    inter=model.moe_intermediate_size / tp,
                    top_k=k,
                    experts=e,
                    local_experts=num_local_experts,
                    weight_bytes=model.quant.experts.bytes_per_weight,
                )
            )
        i = model.moe_intermediate_size / tp
        h = model.hidden_size
        w = model.quant.experts
        m, groups = tokens_per_expert, num_local_experts
        if not isinstance(self._gemm, AlphaBeta) and m > 0:
            # the roofline reads the weights of the local experts the batch hits (module
            # docstring): N = tokens_per_expert * E / k tokens routed at random
            k, e = model.top_k, model.num_experts
            hit = num_local_experts * experts_hit(m * e / k, np.full(1, min(1.0, k / e)))
            m, groups = m * num_local_experts / hit, hit
        return self.grouped_gemm(m, 2 * i, h, groups, w) + self.grouped_gemm(m, h, i, groups, w)

    def warm_expert_ffn(
        self,
        model: ModelSpec,
        tokens_per_expert: list[float],
        num_local_experts: float,
        tp: int = 1,
    ) -> None:
        """Price :meth:`expert_ffn` for many loads at once (one vectorised kernel-table pass;
        later calls are memo hits with the same answers). A no-op without kernel tables."""
        if self._kdb is None:
            return
        model = self.runs(model)
        shapes = [moe_shape(model, x, num_local_experts, tp) for x in tokens_per_expert]
        assert self.engine is not None
        self._kdb.warm("moe", self._device, self.engine, [s for s in shapes if s is not None])

    def _swiglu(self, tokens: float, inter: float, tp: int, h: int, w: ModuleQuant) -> float:
        if inter <= 0 or tokens <= 0:
            return 0.0
        act = self.elementwise(tokens * ew.swiglu_act_bytes(inter, tp))  # silu(gate) * up
        return self.gemm(tokens, 2 * inter / tp, h, w) + self.gemm(tokens, h, inter / tp, w) + act

    def shared_expert(self, model: ModelSpec, tokens: float, tp: int = 1) -> float:
        q = model.quant.shared
        return self._swiglu(tokens, model.shared_intermediate_size, tp, model.hidden_size, q)

    def dense_mlp(self, model: ModelSpec, tokens: float, tp: int = 1) -> float:
        q = model.quant.dense
        return self._swiglu(tokens, model.dense_intermediate_size, tp, model.hidden_size, q)

    def elementwise(self, nbytes: float) -> float:
        """A memory-bound element-wise pass moving ``nbytes`` (read + written): the bytes at
        the memory rate of the GEMM model (the profile's measured roofline, else the
        datasheet bandwidth at :data:`DEFAULT_BW_EFF`; :mod:`moeplan.cost.elementwise`)."""
        if nbytes <= 0:
            return 0.0
        g = self._gemm
        return nbytes / (g.bw if isinstance(g, Roofline) else self._roof.bw)

    def layer_norms(self, model: ModelSpec, tokens: float) -> float:
        """A decoder layer's two fused residual-add RMSNorms over ``tokens`` tokens
        (pre-attention and pre-MLP; :func:`.elementwise.layer_norm_bytes`)."""
        return self.elementwise(tokens * ew.layer_norm_bytes(model))

    def final_norm(self, model: ModelSpec, tokens: float) -> float:
        """The final fused residual-add RMSNorm over ``tokens`` tokens (before the lm-head)."""
        return self.elementwise(tokens * ew.final_norm_bytes(model))

    def router(self, model: ModelSpec, tokens: float) -> float:
        return self.gemm(tokens, model.num_experts, model.hidden_size, model.quant.router)

    # ---- communication -----------------------------------------------------------------
    def _intra_fit(self, op: str, n: int, nbytes: float) -> float | None:
        if self.profile is None:
            return None
        m = self.profile.collective(op, n)
        return None if m is None else float(m(nbytes))

    def collective(self, op: str, nbytes: float, group_size: int, nodes: int = 1) -> float:
        """Collective over ``group_size`` ranks spanning ``nodes`` NVLink domains (nodes, or
        NVL72 racks: :meth:`~moeplan.specs.ClusterSpec.domains_spanned`; nccl-tests bytes)."""
        # the engines' custom all-reduce is a CUDA kernel over NVLink/NVSwitch peer memory;
        # a full-mesh fabric (Ascend HCCS) runs HCCL, priced by the mesh formulas
        kdb_ar = op == "all_reduce" and group_size in ALLREDUCE_GPUS
        kdb_ar = kdb_ar and not is_mesh(self.cluster.intra)
        if self._kdb is not None and nodes <= 1 and nbytes > 0 and kdb_ar:
            return self._kernel(
                "allreduce", {"message_size": nbytes / BF16_BYTES, "num_gpus": group_size}
            )
        if self._kdb is not None and nbytes > 0 and op == "all_to_all":
            # DeepEP: one 8-GPU NVLink domain, or whole 8-GPU domains (internode kernels,
            # transferred); ``nodes`` counts NVLink domains (ClusterSpec.domains_spanned)
            whole = nodes <= 1 or self.cluster.nvlink_domain == DEEPEP_RANKS
            if whole and group_size == DEEPEP_RANKS * max(1, nodes):
                p = self._a2a.get((nbytes, nodes))
                if p is None:
                    p = self._deepep(nbytes, nodes)
                if p is not None:
                    return self._note("all_to_all", p)
        return collective_time(op, nbytes, group_size, nodes, self.cluster, self._intra_fit)

    def _deepep(self, nbytes: float, nodes: int) -> Prediction | None:
        assert self._kdb is not None
        eng = self.engine or ""
        if nodes <= 1:
            p = all_to_all(self._kdb, self._device, eng, nbytes)
        else:
            p = deepep_internode(self._kdb, self._device, eng, nbytes, nodes, self.cluster.inter.bw)
        if len(self._a2a) < A2A_MEMO:
            self._a2a[(nbytes, nodes)] = p
        return p

    def p2p(self, nbytes: float, inter_node: bool) -> float:
        """Point-to-point send between two GPUs (pipeline stages, KV transfers, fused rounds):
        latency + bytes / the bandwidth one GPU pair has — the GPU's NIC across NVLink domains, its
        whole per-GPU bandwidth on a switched fabric, one pair link
        (:func:`~moeplan.cost.collectives.pair_bandwidth`) on a full mesh (HCCS)."""
        if nbytes <= 0:
            return 0.0
        if inter_node:
            return self.cluster.inter.time(nbytes)
        return self.cluster.intra.latency + nbytes / pair_bandwidth(self.cluster)

    def link_transfer(self, nbytes: float, inter_node: bool) -> float:
        """``nbytes`` from one GPU to one other: :meth:`p2p` (one pair's link)."""
        return self.p2p(nbytes, inter_node)

    def a2e(self, bytes_per_expert_gpu: float, ag: int, eg: int) -> float:
        """FinDEP A2E (= E2A) of one chunk: each of ``eg`` expert GPUs receives
        ``bytes_per_expert_gpu`` from ``ag`` attention GPUs (Eq. 4/9).

        Uses the profile's fitted (ag, eg) coefficients when present; otherwise the slower of
        the senders' and receivers' links, inter-node when ``ag + eg`` spans nodes.
        """
        if bytes_per_expert_gpu <= 0:
            return 0.0
        if self.profile is not None and (ag, eg) in self.profile.a2e:
            return self.profile.a2e[(ag, eg)](bytes_per_expert_gpu)
        link = self.cluster.inter if ag + eg > self.cluster.nvlink_domain else self.cluster.intra
        send = bytes_per_expert_gpu * eg / ag
        return link.latency + max(bytes_per_expert_gpu, send) / link.bw
