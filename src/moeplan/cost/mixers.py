"""Price one decoder layer's token mixer by its kind (the model's per-layer description).

For the mixer kinds with their own measured tables (:mod:`.kerneldb.layer_families`) a layer
on one TP rank (heads split ``tp`` ways) is priced as NVIDIA's tables time it:

- ``dsa`` / ``csa`` / ``hca`` / ``msa``: the whole attention block from the module table
  (projections included) for ``num_seqs`` sequences of ``q_len`` new tokens after a prefix of
  ``ctx_len - q_len`` keys — so a DSA layer at long context costs its indexer over every key
  plus attention over ``index_topk`` keys, not dense attention over all of them. The module's
  ``architecture`` (DSA) is the table model whose dimensions match the layer's (else
  DeepSeek-V3.2's, and the prediction's detail says so); KV cache fp8 when the deployment
  stores fp8 (the layer's own width when unstated); projection dtype from the checkpoint's
  attention quantization. A DSA prefill chunk whose sequence holds at most ``index_topk``
  keys reads the dense-MHA kernel's rows, as SGLang runs it (:func:`dsa_dense_prefill`);
  the wide-EP attention (attention DP) prices the same block at TP 1
  (:meth:`moeplan.cost.CostModel.sparse_mixers`).
- ``gdn`` / ``kda``: the short convolution + the delta rule (two kernels, each from its table:
  the engine's kernel for that role, the one with most measured rows) plus the input and
  output projections as GEMMs. The convolution covers the layer's q, k and v channels; where
  a table's rows convolve the keys alone (TensorRT-LLM's collector) the query asks that
  table for the layer's channel count. The recurrent state does not grow with the context: prefill
  costs ``q_len`` tokens whatever the prefix, decode one state update per sequence.
- ``mamba2``: the convolution from TensorRT-LLM's Mamba-2 table; its chunked state-space scan
  has no measured table anywhere and is the datasheet roofline
  (:func:`ssm_scan_features`), labelled ``roofline`` with, as its stated error, the roofline
  error of the delta-rule kernels on the GDN tables (the nearest measured recurrent kernel).

A layer with manifold-constrained hyper-connections (DeepSeek-V4's mHC, ``LayerSpec.hc_mult``)
adds :func:`price_mhc`: the ``pre`` kernel (mix the residual streams into the sub-layer's
input, Sinkhorn steps) and the ``post`` kernel (write its output back) from the engine's
``mhc`` table, whose rows time a layer's two sites (mixer and FFN) together
(``num_sites`` = 2), for every token of the rank.

Every kernel price keeps its :class:`~.kerneldb.Prediction` (source, held-out error), which
:meth:`moeplan.cost.CostModel.mixer_layer` records for ``provenance``. Other mixer kinds
(``mha``, ``mla``, ``swa``, ``chunked``) are priced by the attention paths of
:mod:`.kerneldb.pricing`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeplan.cost.kerneldb.base import BF16_BYTES, Features
from moeplan.cost.kerneldb.db import ROOFLINE, KernelDB
from moeplan.cost.kerneldb.device import Device
from moeplan.cost.kerneldb.linear_features import CHUNK, FP32_BYTES, KEYS_ONLY_CONV, is_conv
from moeplan.cost.kerneldb.sources import Prediction
from moeplan.cost.kerneldb.sparse_features import DSA_DIMS
from moeplan.specs.layers import LayerSpec, Mixer

#: mixer kinds priced here from their own measured tables (module docstring)
TABLE_MIXER_KINDS = ("dsa", "csa", "hca", "msa", "gdn", "kda", "mamba2")
#: mixer kinds priced whole from their module table (projections included)
MODULE_TABLE_KINDS = ("dsa", "csa", "hca", "msa")
#: kernel names standing in for the two roles where an engine has no table (roofline rows)
ROLE_STAND_IN = {"conv": "causal_conv1d", "rule": "delta_rule"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One kernel query: op, shape columns and how many times it runs."""

    op: str
    shape: dict[str, object]
    role: str = "module"  # "conv" / "rule" for the two kernels of a recurrent layer


def _split(n: int, tp: int) -> int:
    return max(1, -(-n // tp))


def dsa_architecture(m: Mixer, hidden: int) -> tuple[str, bool]:
    """(table architecture, exact) for a DSA layer: the one whose dimensions it has."""
    dims = (hidden, m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim,
            m.vo_dim, m.index_n_heads, m.index_head_dim, m.index_topk)  # fmt: skip
    for arch, d in DSA_DIMS.items():
        if d == dims:
            return arch, True
    return "DeepseekV32ForCausalLM", False


def module_call(
    m: Mixer,
    hidden: int,
    gemm_type: str,
    num_seqs: int,
    q_len: int,
    ctx_len: int,
    tp: int,
    kv: str | None = None,
) -> Call:
    """The module-table query of a sparse-attention layer on one TP rank; ``kv`` the KV
    cache dtype the deployment stores (``bf16`` / ``fp8``; ``None``: the layer's own)."""
    phase = "generation" if q_len == 1 else "context"
    fp8_kv = m.kv_bytes == 1 if kv is None else kv == "fp8"
    shape: dict[str, object] = {
        "batch_size": num_seqs,
        "isl": q_len,
        "step": max(0, ctx_len - q_len),
        "num_heads": _split(m.num_heads, tp),
        "kv_cache_dtype": "fp8" if fp8_kv else "bfloat16",
        "gemm_type": "fp8_block" if gemm_type.startswith("fp8") else "bfloat16",
    }
    if m.kind == "dsa":
        shape["architecture"] = dsa_architecture(m, hidden)[0]
    if m.kind in ("csa", "hca"):
        shape["compress_ratio"] = m.compress_ratio
        shape["kv_cache_dtype"] = "fp8"  # DeepSeek-V4 caches compressed KV in fp8 (tables)
    return Call(op=f"{phase}_{m.kind}_module", shape=shape)


def dsa_dense_prefill(m: Mixer, q_len: int, ctx_len: int) -> bool:
    """Whether a DSA prefill chunk runs the dense-MHA kernel instead of the indexer and sparse
    MLA: SGLang's NSA backend does when the longest sequence of the batch holds at most
    ``index_topk`` keys (every key would be selected anyway) on SM90 / SM100 (SGLang
    0.5.14 ``layers/attention/nsa_backend.py`` ``NativeSparseAttnBackend.set_nsa_prefill_impl``:
    ``max_kv_len <= nsa_index_topk``, later releases the same default through
    ``SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD``). The module tables measure both
    kernels (``*_dense_mha_*`` rows up to 2,048 keys, sparse rows from 4,096); an engine
    whose table has no dense kernel (vLLM's ``FLASHMLA_SPARSE``) runs sparse throughout."""
    return m.kind == "dsa" and q_len > 1 and ctx_len <= m.index_topk


def module_kernel(db: KernelDB, device: Device, engine: str, c: Call, dense: bool) -> str | None:
    """The module kernel (``kernel_source``) of a DSA query: among the engine's variants
    with the query's KV dtype, projection dtype and architecture, the dense-MHA kernel when
    ``dense`` (:func:`dsa_dense_prefill`) else a sparse one — the one with most measured rows
    on the GPU's tables, else its reference's; ``None`` where the table names no such
    kernel (the database's own choice then)."""
    want = (c.shape["kv_cache_dtype"], c.shape["gemm_type"], c.shape["architecture"])
    for gpu in (device.table, device.reference):
        if gpu is None:
            continue
        found = [
            (n, k[0])
            for k, n in db.variants(gpu, engine, c.op).items()
            if tuple(k[1:4]) == want and ("dense" in str(k[0])) == dense
        ]
        if found:
            return max(found)[1]
    return None


def recurrent_calls(m: Mixer, num_seqs: int, q_len: int, tp: int) -> list[Call]:
    """The convolution and delta-rule (GDN / KDA) or convolution (Mamba-2) queries."""
    phase = "generation" if q_len == 1 else "context"
    x: dict[str, object] = {"batch_size": num_seqs}
    if q_len > 1:
        x["seq_len"] = q_len
    if m.kind == "mamba2":
        shape = dict(x, nheads=_split(m.num_heads, tp), head_dim=m.head_dim,
                     n_groups=_split(m.ssm_groups, tp), d_state=m.ssm_state, d_conv=m.conv_kernel)  # fmt: skip
        return [Call(op=f"{phase}_mamba2_conv", shape=shape, role="conv")]
    shape = dict(
        x,
        num_k_heads=_split(m.lin_key_heads, tp),
        head_k_dim=m.lin_key_dim,
        num_v_heads=_split(m.lin_value_heads, tp),
        head_v_dim=m.lin_value_dim,
        d_conv=m.conv_kernel,
    )
    op = f"{phase}_{m.kind}"
    return [Call(op=op, shape=shape, role="conv"), Call(op=op, shape=shape, role="rule")]


def role_kernel(db: KernelDB, device: Device, engine: str, op: str, role: str) -> str:
    """The engine's kernel for ``role`` of ``op`` (the variant with most rows on the GPU's
    tables, else its reference's); a stand-in name where the engine measured none."""
    for gpu in (device.table, device.reference):
        if gpu is None:
            continue
        found = [
            (n, k[0])
            for k, n in db.variants(gpu, engine, op).items()
            if bool(is_conv(np.array([k[0]]))[0]) == (role == "conv")
        ]
        if found:
            return max(found)[1]
    return ROLE_STAND_IN[role]


def keys_only_conv(db: KernelDB, device: Device, engine: str, op: str) -> bool:
    """Whether the engine's ``op`` table (the GPU's, else its reference's) comes from the
    collector whose convolution rows convolve the key channels alone
    (:data:`~.kerneldb.linear_features.KEYS_ONLY_CONV`)."""
    for gpu in (device.table, device.reference):
        if gpu is not None and (keys := db.variants(gpu, engine, op)):
            return any(k[1] == KEYS_ONLY_CONV for k in keys if len(k) > 1)
    return False


def projection_gemms(m: Mixer, hidden: int, tokens: float, tp: int) -> list[tuple[float, ...]]:
    """(m, n, k) of a recurrent layer's input and output projections on one TP rank:
    GDN / KDA ``in_proj`` to q, k, v, the output gate and the per-head gates, ``out_proj``
    back (Qwen3.5 / Kimi modelling code); Mamba-2 ``in_proj`` to x, z, B, C, dt and
    ``out_proj`` (Nemotron-H)."""
    if m.kind == "mamba2":
        inner = _split(m.num_heads, tp) * m.head_dim
        n_in = 2 * inner + 2 * _split(m.ssm_groups, tp) * m.ssm_state + _split(m.num_heads, tp)
    else:
        kh, vh = _split(m.lin_key_heads, tp), _split(m.lin_value_heads, tp)
        inner = vh * m.lin_value_dim
        n_in = 2 * kh * m.lin_key_dim + 2 * inner + 2 * vh
    return [(tokens, n_in, hidden), (tokens, hidden, inner)]


def ssm_scan_features(m: Mixer, num_seqs: int, q_len: int, tp: int) -> Features:
    """Mamba-2's chunked scan on one TP rank (no table): FLOPs per token and head
    ``2 head_dim d_state`` x 3 (state update, output, the chunk's ``C B^T``) +
    ``2 CHUNK head_dim`` (intra-chunk mixing); bytes: x, B, C, dt in and y out in bf16, the
    fp32 state read and written once per chunk (decode: once)."""
    h, p, n = _split(m.num_heads, tp), m.head_dim, m.ssm_state
    g = _split(m.ssm_groups, tp)
    t = float(num_seqs * q_len)
    chunks = num_seqs * np.ceil(q_len / CHUNK)
    flops = t * h * (6 * p * n + 2 * CHUNK * p * (q_len > 1))
    nbytes = BF16_BYTES * t * (2 * h * p + 2 * g * n + h) + 2 * chunks * h * p * n * FP32_BYTES
    one = np.ones(1)
    return Features(flops=flops * one, nbytes=nbytes * one, work=num_seqs * one,
                    fp8=np.zeros(1, bool), tokens=t * one, coords=np.zeros((1, 1)))  # fmt: skip


def ssm_scan(db: KernelDB, device: Device, engine: str, m: Mixer, num_seqs: int, q_len: int,
             tp: int) -> Prediction:  # fmt: skip
    """The roofline of Mamba-2's scan, with the GDN delta rule's roofline error stated."""
    f = ssm_scan_features(m, num_seqs, q_len, tp)
    seconds = float(ROOFLINE.predict(f, device, False)[0])
    proxy = "generation_gdn" if q_len == 1 else "context_gdn"
    err = db.error(device.table, engine, proxy, "roofline") or db.error(
        None, engine, proxy, "roofline"
    )
    return Prediction(
        seconds=seconds,
        source="roofline",
        error=None if err is None else err[0],
        error_p90=None if err is None else err[1],
        detail=f"no measured table for Mamba-2's scan: datasheet roofline of {device.name}; "
        f"error: the roofline's on the {proxy} tables",
    )


def price_mixer(
    db: KernelDB,
    device: Device,
    engine: str,
    m: Mixer,
    hidden: int,
    gemm_type: str,
    shape: tuple[int, int, int, int],
    gemm: object,
    kv: str | None = None,
) -> tuple[float, list[tuple[str, Prediction]]]:
    """Seconds of one ``m`` layer on one TP rank for ``shape`` = (sequences, new tokens per
    sequence, keys per sequence, tp), and the kernel predictions behind it (op, prediction).
    ``gemm(m, n, k)`` prices the recurrent kinds' projections (the CostModel's GEMM); ``kv``
    the stored KV dtype (``None``: the layer's own)."""
    num_seqs, q_len, ctx_len, tp = shape
    if m.kind in MODULE_TABLE_KINDS:
        calls = [module_call(m, hidden, gemm_type, num_seqs, q_len, ctx_len, tp, kv)]
    else:
        calls = recurrent_calls(m, num_seqs, q_len, tp)
    preds: list[tuple[str, Prediction]] = []
    for c in calls:
        cols = dict(c.shape)
        if c.role != "module":
            cols["kernel_source"] = role_kernel(db, device, engine, c.op, c.role)
        elif m.kind == "dsa":
            dense = dsa_dense_prefill(m, q_len, ctx_len)
            if (kernel := module_kernel(db, device, engine, c, dense)) is not None:
                cols["kernel_source"] = kernel
        if c.role == "conv" and m.kind != "mamba2" and keys_only_conv(db, device, engine, c.op):
            # the table's conv rows convolve nk dk channels: ask for the layer's q, k, v
            cols["num_k_heads"] = (2 * _split(m.lin_key_heads, tp) * m.lin_key_dim
                                   + _split(m.lin_value_heads, tp) * m.lin_value_dim
                                   ) / m.lin_key_dim  # fmt: skip
        preds.append((c.op, db.predict(c.op, device, engine, **cols)))
    total = sum(p.seconds for _, p in preds)
    if m.kind == "mamba2":
        scan = ssm_scan(db, device, engine, m, num_seqs, q_len, tp)
        preds.append(("mamba2_scan", scan))
        total += scan.seconds
    if m.kind not in MODULE_TABLE_KINDS:
        total += sum(gemm(*g) for g in projection_gemms(m, hidden, num_seqs * q_len, tp))  # type: ignore[operator]
    return total, preds


#: mHC sites per decoder layer: one around the mixer, one around the FFN (DeepSeek-V4
#: ``inference/model.py`` Block: ``hc_attn_*`` and ``hc_ffn_*``; NVIDIA's table: num_sites 2)
MHC_SITES = 2


def mhc_kernel(db: KernelDB, device: Device, engine: str, op_name: str) -> str | None:
    """The engine's mHC kernel for ``op_name`` (``pre`` / ``post``): the variant with most
    measured rows on the GPU's tables, else its reference's; ``None`` where it has none."""
    for gpu in (device.table, device.reference):
        if gpu is None:
            continue
        found = [(n, k[0]) for k, n in db.variants(gpu, engine, "mhc").items() if k[1] == op_name]
        if found:
            return max(found)[1]
    return None


def price_mhc(
    db: KernelDB, device: Device, engine: str, layer: LayerSpec, hidden: int, tokens: int
) -> tuple[float, list[tuple[str, Prediction]]]:
    """Seconds of one layer's mHC (``pre`` + ``post`` at both sites) for ``tokens`` tokens
    of one rank, and the predictions behind it; ``(0, [])`` for a layer without mHC."""
    if layer.hc_mult == 0 or tokens <= 0:
        return 0.0, []
    preds: list[tuple[str, Prediction]] = []
    for op_name in ("pre", "post"):
        cols: dict[str, object] = dict(
            mhc_op=op_name, num_tokens=tokens, hidden_size=hidden, hc_mult=layer.hc_mult,
            num_sites=MHC_SITES, sinkhorn_iters=layer.hc_sinkhorn_iters,
        )  # fmt: skip
        kernel = mhc_kernel(db, device, engine, op_name)
        if kernel is not None:
            cols["kernel_source"] = kernel
        preds.append(("mhc", db.predict("mhc", device, engine, **cols)))
    return sum(p.seconds for _, p in preds), preds
