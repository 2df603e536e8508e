"""A whole decoder stack and wide-EP expert shards, measured on one GPU.

Two steps of ``bench/gpu_session.py`` (``stack`` and ``wideep``); the predictions are added on
any machine afterwards by ``bench/gpu_phase_vs_sim.py``.

``stack``: every layer of a GQA MoE model (Qwen3-30B-A3B by default) at full width in bf16,
random weights drawn on the GPU, run as an engine runs it:

- decode: ``batch`` sequences, one new token each, a real KV cache of ``context`` tokens per
  sequence and layer (``[batch, kv_heads, context, head_dim]``, the new token's K/V written
  into its slot), attention over the cache with the query heads of one KV head packed as the
  query rows (FlashDecoding's GQA layout: the cache is read once per KV head), the runtime's MoE
  layer (:func:`moeplan.runtime.layers.moe.moe_forward`: router, top-k, grouped experts), the
  final norm and the lm-head; the whole step captured in one CUDA graph and replayed;
- prefill: ``batch`` prompts of ``context`` tokens, causal attention (FlashAttention through
  SDPA, grouped-query), the same MoE layer, logits of each prompt's last token only (what the
  engines compute); timed eager and as a CUDA graph.

Besides the whole step, each part is timed alone as a CUDA graph on the same inputs: the
attention block (norm, QKV projection, QK-norm, RoPE, cache write, attention core, output
projection, residual), its core and its projections alone, the MoE block (norm, router, experts,
residual), the routed experts alone (routing precomputed), and the head (final norm, lm-head).
What the parts do not cover (embedding, graph gaps) is the step minus their sum.

``wideep``: one GPU of a wide-EP group, the tokens already dispatched to it: ``T`` tokens per
GPU and top-k ``k`` make ``T * k`` routed copies spread evenly over ``E_local`` local experts of
DeepSeek-V3's shape (H 7168, I 2048); timed as CUDA graphs: the bf16 grouped GEMMs
(``torch._grouped_mm``: gate and up fused, SiLU-and-multiply, down), the same in fp8
(``torch._scaled_grouped_mm``, e4m3 with row-wise scales on activations and per-column scales
on weights, activations quantized in the timed region; DeepGEMM uses 1x128 / 128x128 block
scales, which torch does not expose) and the runtime's routed-expert path
(:func:`moeplan.runtime.kernels.grouped_moe`: permutation, gather, grouped GEMMs, weighted
combine) on the copies as rows.

On a CPU every shape is divided by ``scale`` (``--small``) so the code paths can be checked
without a GPU; CUDA graphs and fp8 are CUDA-only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from moeplan.profiling.timing import median_time
from moeplan.runtime.config import from_model_spec
from moeplan.runtime.kernels import grouped_moe
from moeplan.runtime.layers.moe import MoEWeights, moe_forward, route
from moeplan.specs import load_model

#: (batch, context) of the decode grid; pairs past ``MAX_KV_TOKENS`` are skipped
DECODE = [(b, c) for b in (1, 16, 64, 128, 256) for c in (1024, 2048, 4096, 8192)]
#: (batch, prompt length) of the prefill grid
PREFILL = [(1, 1024), (4, 1024), (16, 1024), (1, 4096), (4, 4096), (1, 8192), (2, 8192)]
#: KV tokens held at once: 512K x 96 KiB (Qwen3-30B-A3B, 48 layers, bf16) = 48 GiB beside the
#: 57 GiB of weights on a 141 GB H200; an 80 GB H100 takes ``--max-kv-tokens 131072``
MAX_KV_TOKENS = 1 << 19
WIDE_LOCAL = (2, 4, 8, 16)
WIDE_DECODE = (16, 32, 64, 128, 256, 512)
WIDE_PREFILL = (4096, 8192, 16384)


@dataclass(frozen=True)
class Shape:
    """The widths of the stack (the model spec's, divided by ``scale`` on a CPU)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    vocab: int
    qk_norm: bool


def shape_of(model: str, scale: int, layers: int | None) -> Shape:
    s = load_model(model)
    return Shape(
        hidden=s.hidden_size // scale,
        heads=max(1, s.num_attention_heads // scale),
        kv_heads=max(1, s.num_kv_heads // scale),
        head_dim=s.head_dim,
        layers=layers or s.num_layers,
        vocab=s.vocab_size // scale,
        qk_norm=bool(getattr(s, "qk_norm", False)),
    )


def _rand(*shape: int, dev: torch.device, dtype: torch.dtype, std: float) -> torch.Tensor:
    t = torch.randn(*shape, device=dev, dtype=torch.float32 if dev.type == "cpu" else dtype)
    return t.mul_(std).to(dtype)


@dataclass
class Layer:
    wqkv: torch.Tensor  # [H, (heads + 2 kv) * d]
    wo: torch.Tensor  # [heads * d, H]
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    moe: MoEWeights


class Stack:
    """Random weights of the whole stack on ``dev`` and its forward passes."""

    def __init__(
        self,
        model: str,
        dev: torch.device,
        scale: int = 1,
        layers: int | None = None,
        dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        spec = load_model(model)
        self.s = sh = shape_of(model, scale, layers)
        self.cfg = from_model_spec(spec, "full", num_layers=sh.layers)
        if scale > 1:
            from dataclasses import replace

            self.cfg = replace(
                self.cfg,
                hidden_size=sh.hidden,
                num_heads=sh.heads,
                moe_intermediate_size=max(16, self.cfg.moe_intermediate_size // scale),
                num_experts=max(self.cfg.top_k, self.cfg.num_experts // scale),
            )
        self.dev, self.dt = dev, dtype
        h, d, c = sh.hidden, sh.head_dim, self.cfg
        e, i = c.num_experts, c.moe_intermediate_size
        qkv = (sh.heads + 2 * sh.kv_heads) * d

        def r(*shape: int) -> torch.Tensor:
            return _rand(*shape, dev=dev, dtype=self.dt, std=shape[-2] ** -0.5)

        self.layers = [
            Layer(
                wqkv=r(h, qkv),
                wo=r(sh.heads * d, h),
                q_norm=torch.ones(d, device=dev, dtype=self.dt),
                k_norm=torch.ones(d, device=dev, dtype=self.dt),
                moe=MoEWeights(
                    gate=r(h, e), bias=None, w_gate=r(e, h, i), w_up=r(e, h, i), w_down=r(e, i, h)
                ),
            )
            for _ in range(sh.layers)
        ]
        self.embed = _rand(sh.vocab, h, dev=dev, dtype=self.dt, std=1.0)
        self.head = r(h, sh.vocab)
        self.norm = torch.ones(h, device=dev, dtype=self.dt)
        inv = 1.0 / (1e6 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
        self._inv_freq = inv  # Qwen3's rope_theta 1e6
        self._compiled: Any = None
        self._post = self._post_eager
        self.compile_error: str | None = None if dev.type == "cuda" else "CPU run: eager"

    # ---- pieces ---------------------------------------------------------------------------
    @staticmethod
    def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), w, 1e-6)

    def rope(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = pos.float()[:, None] * self._inv_freq[None, :]
        emb = torch.cat([f, f], dim=-1)
        return emb.cos().to(self.dt), emb.sin().to(self.dt)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-b, a], dim=-1) * sin

    def qkv(self, x: torch.Tensor, w: Layer, cos: torch.Tensor, sin: torch.Tensor) -> tuple:
        """``x [N, H]`` -> q ``[N, heads, d]``, k, v ``[N, kv, d]`` (QK-norm, RoPE applied)."""
        y = self._rms(x, self.norm) @ w.wqkv
        return self._post(y, w.q_norm, w.k_norm, cos, sin)

    def _post_eager(self, y: Any, qn: Any, kn: Any, cos: Any, sin: Any) -> tuple:
        """Split the QKV projection, QK-norm, RoPE: the element-wise work the engines fuse."""
        sh = self.s
        d = sh.head_dim
        q, k, v = y.split([sh.heads * d, sh.kv_heads * d, sh.kv_heads * d], dim=-1)
        q, k = q.view(-1, sh.heads, d), k.view(-1, sh.kv_heads, d)
        if sh.qk_norm:
            q, k = self._rms(q, qn), self._rms(k, kn)
        c, s_ = cos[:, None, :], sin[:, None, :]
        return self._rotate(q, c, s_), self._rotate(k, c, s_), v.reshape(-1, sh.kv_heads, d)

    def fuse(self, on: bool) -> None:
        """``on``: the element-wise work compiled into fused kernels (``torch.compile``, as
        vLLM compiles its model and SGLang runs fused QK-norm/RoPE kernels); off: eager."""
        if not on:
            self._post = self._post_eager
            return
        if self._compiled is None:
            import torch._dynamo as dynamo

            for knob in ("cache_size_limit", "recompile_limit"):  # one graph per batch shape
                if hasattr(dynamo.config, knob):
                    setattr(dynamo.config, knob, 64)
            self._compiled = torch.compile(self._post_eager, dynamic=True)
        self._post = self._compiled

    def sdpa(self, q: Any, k: Any, v: Any, causal: bool, backends: Any = None) -> Any:
        """SDPA with grouped-query K/V as the calibration measured it (``enable_gqa``), any
        backend but the unfused math one (``backends`` narrows the choice)."""
        gqa = q.shape[1] != k.shape[1]
        if self.dev.type != "cuda":
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        fast = backends or [
            SDPBackend.CUDNN_ATTENTION,
            SDPBackend.FLASH_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION,
        ]
        with sdpa_kernel(fast):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    def decode_core(self, q: Any, kc: Any, vc: Any, backends: Any = None) -> torch.Tensor:
        """``q [B, heads, d]``, one query each, over the cache ``[B, kv, C, d]`` -> ``[B,
        heads * d]``."""
        b = q.shape[0]
        return self.sdpa(q.view(b, self.s.heads, 1, -1), kc, vc, False, backends).reshape(b, -1)

    def decode_core_packed(self, q: Any, kc: Any, vc: Any) -> torch.Tensor:
        """The query heads of each KV head as query rows (FlashDecoding's GQA layout: the
        cache read once per KV head, ``B x kv`` thread blocks without split-KV)."""
        b, kv = q.shape[0], self.s.kv_heads
        o = F.scaled_dot_product_attention(q.view(b, kv, self.s.heads // kv, -1), kc, vc)
        return o.reshape(b, -1)

    def prefill_core(self, q: Any, k: Any, v: Any, b: int, backends: Any = None) -> Any:
        """Causal attention of ``b`` prompts: ``q [b*S, heads, d]``, ``k, v [b*S, kv, d]``."""
        sh = self.s
        s = q.shape[0] // b

        def heads(t: torch.Tensor, n: int) -> torch.Tensor:
            return t.view(b, s, n, sh.head_dim).transpose(1, 2)

        qh, kh, vh = heads(q, sh.heads), heads(k, sh.kv_heads), heads(v, sh.kv_heads)
        o = self.sdpa(qh, kh, vh, True, backends)
        return o.transpose(1, 2).reshape(b * s, -1)

    def moe_block(self, x: torch.Tensor, w: Layer) -> torch.Tensor:
        return x + moe_forward(self._rms(x, self.norm), w.moe, self.cfg)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self._rms(x, self.norm) @ self.head

    # ---- steps ----------------------------------------------------------------------------
    def decode_attn(self, x: torch.Tensor, w: Layer, kc: Any, vc: Any, rope: tuple) -> Any:
        q, k, v = self.qkv(x, w, *rope)
        kc[:, :, -1] = k  # the new token's slot (position context - 1)
        vc[:, :, -1] = v
        return x + self.decode_core(q, kc, vc) @ w.wo

    def decode_step(self, ids: torch.Tensor, cache: list[tuple], rope: tuple) -> torch.Tensor:
        x = self.embed[ids]
        for w, (kc, vc) in zip(self.layers, cache, strict=True):
            x = self.moe_block(self.decode_attn(x, w, kc, vc, rope), w)
        return self.logits(x)

    def prefill_attn(self, x: torch.Tensor, w: Layer, b: int, rope: tuple) -> torch.Tensor:
        q, k, v = self.qkv(x, w, *rope)
        return x + self.prefill_core(q, k, v, b) @ w.wo

    def prefill_step(self, ids: torch.Tensor, b: int, rope: tuple) -> torch.Tensor:
        x = self.embed[ids]
        for w in self.layers:
            x = self.moe_block(self.prefill_attn(x, w, b, rope), w)
        last = x.view(b, -1, x.shape[-1])[:, -1]
        return self.logits(last)

    def prefill_cache(self, ids: torch.Tensor, rope: tuple) -> tuple[torch.Tensor, list]:
        """One prompt's last-token logits and its KV cache in the decode layout (the
        decode-vs-prefill check: decoding the last token over this cache gives the same)."""
        x, cache = self.embed[ids], []
        for w in self.layers:
            q, k, v = self.qkv(x, w, *rope)
            cache.append(tuple(t.transpose(0, 1)[None].contiguous() for t in (k, v)))
            x = self.moe_block(x + self.prefill_core(q, k, v, 1) @ w.wo, w)
        return self.logits(x[-1:]), cache

    def check_decode(self, s: int, seed: int = 0) -> float:
        """Relative difference of the last token's logits: decode over the prompt's cache
        vs the prompt's prefill (0 up to rounding when cache layout, GQA packing and RoPE
        positions agree)."""
        gen = torch.Generator(device=self.dev).manual_seed(seed)
        ids = torch.randint(0, self.s.vocab, (s,), device=self.dev, generator=gen)
        ref, cache = self.prefill_cache(ids, self.rope(torch.arange(s, device=self.dev)))
        got = self.decode_step(ids[-1:], cache, self.rope(torch.full((1,), s - 1, device=self.dev)))
        return float((got.float() - ref.float()).norm() / ref.float().norm())

    def kv_cache(self, b: int, ctx: int, layers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        sh = self.s
        return [
            tuple(  # type: ignore[misc]
                _rand(b, sh.kv_heads, ctx, sh.head_dim, dev=self.dev, dtype=self.dt, std=1.0)
                for _ in range(2)
            )
            for _ in range(layers)
        ]


def _time(fn: Callable[..., Any], args: tuple, dev: torch.device, graph: bool, n: int) -> Any:
    """Median seconds (``graph``: CUDA-graph replays), or the error's first 300 characters."""
    try:
        return median_time(fn, [args], device=dev, warmup=2, repeats=n, graph=graph)
    except Exception as err:  # recorded per row: one failed shape must not end the session
        return {"error": repr(err)[:300]}


def _parts(st: Stack, x: torch.Tensor, attn: Callable, core: Callable, dev: Any) -> dict:
    """Each part of one layer alone, CUDA-graph replays (see the module docstring)."""
    w, sh = st.layers[0], st.s
    d = sh.head_dim
    r = st.cfg
    routing = route(x, w.moe, r)
    proj_in = torch.randn(x.shape[0], sh.heads * d, device=dev, dtype=st.dt)
    graph = dev.type == "cuda"
    return {
        "attn_block_s": _time(attn, (x,), dev, graph, 20),
        "attn_core_s": _time(core, (), dev, graph, 20),
        "attn_proj_s": _time(lambda x, p: (x @ w.wqkv, p @ w.wo), (x, proj_in), dev, graph, 20),
        "moe_block_s": _time(lambda x: st.moe_block(x, w), (x,), dev, graph, 20),
        "router_s": _time(lambda x: route(x, w.moe, r), (x,), dev, graph, 20),
        "experts_s": _time(
            lambda x: grouped_moe(
                x, routing.ids, routing.weights, w.moe.w_gate, w.moe.w_up, w.moe.w_down
            ),
            (x,),
            dev,
            graph,
            20,
        ),  # fmt: skip
    }


def _backends(core: Callable[[Any], Any], dev: torch.device) -> dict[str, Any]:
    """The attention core with each fused SDPA backend alone (diagnostic: which kernel the
    dispatcher's choice is, and what the others would take)."""
    if dev.type != "cuda":
        return {}
    from torch.nn.attention import SDPBackend

    names = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION}  # fmt: skip
    return {n: _time(lambda be=be: core([be]), (), dev, True, 20) for n, be in names.items()}


def _both_steps(st: Stack, step: Callable, args: tuple, dev: Any, graph: bool, n: int) -> dict:
    """The whole step with the element-wise work eager, then compiled (the parts after it
    are timed compiled when compiling worked)."""
    st.fuse(False)
    out = {"eager_elementwise_step_s": _time(step, args, dev, graph, n)}
    if st.compile_error is None:
        st.fuse(True)
        out["step_s"] = _time(step, args, dev, graph, n)
        if is_error(out["step_s"]):
            st.compile_error = out["step_s"]["error"]
    if st.compile_error is not None:
        st.fuse(False)
        out["step_s"] = out["eager_elementwise_step_s"]
    out["elementwise"] = "eager" if st.compile_error is not None else "compiled"
    return out


def decode_row(st: Stack, b: int, ctx: int, dev: torch.device, layers: int) -> dict[str, Any]:
    cache = st.kv_cache(b, ctx, layers)
    pos = torch.full((b,), ctx - 1, device=dev)
    rope = st.rope(pos)
    ids = torch.randint(0, st.s.vocab, (b,), device=dev)
    graph = dev.type == "cuda"
    row: dict[str, Any] = {"phase": "decode", "batch": b, "context": ctx, "layers": layers}
    row |= _both_steps(st, lambda i: st.decode_step(i, cache, rope), (ids,), dev, graph, 20)
    x = torch.randn(b, st.s.hidden, device=dev, dtype=st.dt)
    w, (kc, vc) = st.layers[0], cache[0]
    q = torch.randn(b, st.s.heads, st.s.head_dim, device=dev, dtype=st.dt)
    row |= _parts(
        st,
        x,
        lambda x: st.decode_attn(x, w, kc, vc, rope),
        lambda: st.decode_core(q, kc, vc),
        dev,
    )
    row["head_s"] = _time(st.logits, (x,), dev, graph, 20)
    row["core_by_backend_s"] = _backends(lambda be: st.decode_core(q, kc, vc, be), dev)
    row["core_packed_s"] = _time(lambda: st.decode_core_packed(q, kc, vc), (), dev, graph, 20)
    return row


def prefill_row(st: Stack, b: int, s: int, dev: torch.device) -> dict[str, Any]:
    rope = st.rope(torch.arange(s, device=dev).repeat(b))
    ids = torch.randint(0, st.s.vocab, (b * s,), device=dev)
    row: dict[str, Any] = {"phase": "prefill", "batch": b, "context": s, "tokens": b * s}
    graph = dev.type == "cuda"
    st.fuse(st.compile_error is None)
    row["eager_s"] = _time(lambda i: st.prefill_step(i, b, rope), (ids,), dev, False, 3)
    row |= _both_steps(st, lambda i: st.prefill_step(i, b, rope), (ids,), dev, graph, 3)
    x = torch.randn(b * s, st.s.hidden, device=dev, dtype=st.dt)
    w, sh = st.layers[0], st.s
    q = torch.randn(b * s, sh.heads, sh.head_dim, device=dev, dtype=st.dt)
    k, v = (torch.randn(b * s, sh.kv_heads, sh.head_dim, device=dev, dtype=st.dt) for _ in "kv")
    row |= _parts(
        st,
        x,
        lambda x: st.prefill_attn(x, w, b, rope),
        lambda: st.prefill_core(q, k, v, b),
        dev,
    )
    row["head_s"] = _time(st.logits, (x.view(b, s, -1)[:, -1].contiguous(),), dev, graph, 20)
    row["core_by_backend_s"] = _backends(lambda be: st.prefill_core(q, k, v, b, be), dev)
    return row


def run_stack(
    dev: torch.device,
    *,
    model: str = "qwen3-30b-a3b",
    scale: int = 1,
    layers: int | None = None,
    max_kv_tokens: int = MAX_KV_TOKENS,
    log: Callable[[str], None] = print,
    save: Callable[[dict[str, Any]], None] = lambda d: None,
) -> dict[str, Any]:
    """Every decode and prefill row of the grid (module docstring); ``layers`` trims the stack
    (the trim is recorded; only for a card whose memory forces it); ``save`` gets the
    results so far after every row."""
    t0 = time.time()
    st = Stack(model, dev, scale, layers)
    out: dict[str, Any] = {
        "model": model,
        "scale": scale,
        "decode_vs_prefill_rel_err": st.check_decode(max(16, 1024 // scale)),
        "layers": st.s.layers,
        "init_s": time.time() - t0,
        "weights_gib": sum(p.numel() * 2 for p in _params(st)) / 2**30,
        "rows": [],
    }
    for b, c in DECODE:
        c2 = max(16, c // scale)
        if b * c > max_kv_tokens:
            continue
        out["rows"].append(decode_row(st, b, c2, dev, st.s.layers))
        log(f"decode b={b} ctx={c2}: {out['rows'][-1].get('step_s')}")
        save(out)
        _free(dev)
    for b, s in PREFILL:
        s2 = max(16, s // scale)
        out["rows"].append(prefill_row(st, b, s2, dev))
        log(f"prefill b={b} S={s2}: {out['rows'][-1].get('step_s', out['rows'][-1]['eager_s'])}")
        save(out)
        _free(dev)
    out["seconds"] = time.time() - t0
    out["compile_error"] = st.compile_error
    return out


def _params(st: Stack) -> list[torch.Tensor]:
    ps = [st.embed, st.head]
    for w in st.layers:
        m = w.moe
        ps += [w.wqkv, w.wo, m.gate, m.w_gate, m.w_up, m.w_down]
    return ps


def _free(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# ---- wide-EP shards -------------------------------------------------------------------------
def _fp8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise e4m3 quantization: ``(x_fp8, scale [rows] float32)``."""
    amax = x.abs().amax(dim=-1).float().clamp(min=1e-6)
    scale = amax / 448.0  # e4m3's largest finite value
    return (x.float() / scale[:, None]).to(torch.float8_e4m3fn), scale


def _fp8_weights(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``w [E, K, N]`` -> column-major e4m3 ``[E, K, N]`` and per-column scales ``[E, N]``."""
    wt = w.transpose(-2, -1).contiguous()  # [E, N, K]: K contiguous, as the kernel wants
    amax = wt.abs().amax(dim=-1).float().clamp(min=1e-6)
    scale = amax / 448.0
    q = (wt.float() / scale[..., None]).to(torch.float8_e4m3fn)
    return q.transpose(-2, -1), scale


def wide_row(e_local: int, tokens: int, dev: torch.device, h: int, i: int, k: int) -> dict:
    """One shard shape: bf16 / fp8 grouped GEMMs and the runtime's path (module docstring)."""
    rows = tokens * k
    row: dict[str, Any] = {"e_local": e_local, "tokens": tokens, "top_k": k, "rows": rows}
    graph = dev.type == "cuda"
    counts = torch.full((e_local,), rows // e_local, device=dev)
    counts[: rows % e_local] += 1
    offs = torch.cumsum(counts, 0).to(torch.int32)
    x = torch.randn(rows, h, device=dev, dtype=torch.bfloat16)
    w13 = _rand(e_local, h, 2 * i, dev=dev, dtype=torch.bfloat16, std=h**-0.5)
    w2 = _rand(e_local, i, h, dev=dev, dtype=torch.bfloat16, std=i**-0.5)
    if graph and hasattr(torch, "_grouped_mm"):
        mm = torch._grouped_mm  # type: ignore[attr-defined]

        def bf16(x: torch.Tensor) -> torch.Tensor:
            g, u = mm(x, w13, offs=offs).chunk(2, dim=-1)
            return mm(F.silu(g) * u, w2, offs=offs)

        row["bf16_s"] = _time(bf16, (x,), dev, True, 20)
    if graph and hasattr(torch, "_scaled_grouped_mm"):
        row |= _wide_fp8(x, w13, w2, offs, dev)
    ids = (torch.arange(rows, device=dev) % e_local)[:, None]
    wt = torch.ones(rows, 1, device=dev, dtype=torch.float32)
    wg, wu = w13[..., :i].contiguous(), w13[..., i:].contiguous()
    row["runtime_s"] = _time(lambda x: grouped_moe(x, ids, wt, wg, wu, w2), (x,), dev, graph, 20)
    row["flops"] = 6.0 * rows * h * i
    row["weight_bytes_bf16"] = 3.0 * e_local * h * i * 2
    return row


def _wide_fp8(x: Any, w13: Any, w2: Any, offs: Any, dev: torch.device) -> dict[str, Any]:
    smm = torch._scaled_grouped_mm  # type: ignore[attr-defined]
    try:
        q13, s13 = _fp8_weights(w13)
        q2, s2 = _fp8_weights(w2)

        def fp8(xq: torch.Tensor, sx: torch.Tensor) -> torch.Tensor:
            y = smm(xq, q13, sx, s13, offs=offs, out_dtype=torch.bfloat16)
            g, u = y.chunk(2, dim=-1)
            hq, sh = _fp8_rows(F.silu(g) * u)
            return smm(hq, q2, sh, s2, offs=offs, out_dtype=torch.bfloat16)

        xq, sx = _fp8_rows(x)  # dispatched in fp8 (DeepEP), so outside the timed region
        out = {"fp8_s": _time(fp8, (xq, sx), dev, True, 20)}
        y8 = fp8(xq, sx).float()
        mm = torch._grouped_mm  # type: ignore[attr-defined]
        g, u = mm(x, w13, offs=offs).chunk(2, dim=-1)
        y16 = mm(F.silu(g) * u, w2, offs=offs).float()
        out["fp8_rel_err"] = float((y8 - y16).norm() / y16.norm())
        return out
    except Exception as err:  # no fp8 grouped GEMM in this torch build or on this card
        return {"fp8_error": repr(err)[:300]}


def run_wideep(
    dev: torch.device,
    *,
    scale: int = 1,
    log: Callable[[str], None] = print,
    save: Callable[[dict[str, Any]], None] = lambda d: None,
) -> dict[str, Any]:
    """DeepSeek-V3's expert shape on 2/4/8/16 local experts, decode and prefill token counts."""
    spec = load_model("deepseek-v3")
    h, i, k = spec.hidden_size // scale, spec.moe_intermediate_size // scale, spec.top_k
    out: dict[str, Any] = {"model": "deepseek-v3", "hidden": h, "inter": i, "rows": []}
    for e in WIDE_LOCAL:
        for t in WIDE_DECODE + WIDE_PREFILL:
            t2 = t if scale == 1 else max(4, t // scale)
            row = wide_row(e, t2, dev, h, i, k)
            row["phase"] = "decode" if t in WIDE_DECODE else "prefill"
            row["experts"] = spec.num_experts
            row["ep"] = spec.num_experts // e
            out["rows"].append(row)
            log(f"wideep E_local={e} T={t2}: {row.get('fp8_s')} {row.get('bf16_s')}")
            save(out)
            _free(dev)
    return out


def is_error(v: Any) -> bool:
    return isinstance(v, dict) and "error" in v
