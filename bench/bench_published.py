"""Published wide-EP deployments of DeepSeek-V3/R1, predicted by ``serve-sim --phase``.

Each row is a deployment whose setup its source states (layout, batch, context), expressed in
moeplan at that layout, and its published per-GPU throughput. Sources (read with the search
tool; figures transcribed, not fitted):

- ``lmsys``: lmsys.org blog 2025-05-05 "Deploying DeepSeek with PD Disaggregation and
  Large-scale Expert Parallelism on 96 H100 GPUs" and its reproduction instructions
  (sgl-project/sglang issue #6017): prefill EP32 over 4 nodes, DP attention, DeepEP normal,
  two-batch overlap, 32 redundant experts (EPLB), 16,384 tokens per GPU; 54.5k / 50.3k input
  tokens/s per node at 2K / 4K prompts with the expert distribution of their data (EPLB
  from statistics "matching the input/output data"), and 59.3k per node at 4K with
  "simulated perfect EPLB" (random expert selection under group-limited routing: balanced
  routing, what moeplan prices without a routing trace). Decode EP72 over 9 nodes, DeepEP low-latency, TBO,
  32 redundant experts, 256 requests per GPU at KV length 2,000: 22.3k output tokens/s per
  node.
- ``deepseek``: deepseek-ai/open-infra-index, 202502OpenSourceWeek day 6 "DeepSeek-V3/R1
  Inference System Overview" (H800): prefill EP32 / 4 nodes, decode EP144 / 18 nodes, 32
  redundant experts, two micro-batches; 24-hour averages of 73.7k input tokens/s per node
  (56.3 % of them cache hits, so 32.2k computed) and 14.8k output tokens/s per node at an
  average KV length of 4,989 and 20-22 tokens/s per user. deepseek-ai/profile-data: prefill
  profiled at 4K prompts, 16K tokens per GPU. MTP: one draft token, 85-90 % acceptance of
  the second token (DeepSeek-V3 technical report §5.4.3); the decode batch per GPU is not
  published: 1,850 output tokens/s per GPU / 21 tokens/s per user = 88 sequences per GPU
  (with 1.85 tokens per step, a step of 1.85 / 21 s = 88 ms).
  Daily averages include off-peak hours: a lower bound on a saturated deployment.
- ``deepseek-profile``: deepseek-ai/profile-data, decoding: EP128 on 16 nodes of H800, 128
  requests per GPU at a 4K prompt, two micro-batches overlapping computation and all-to-all,
  bf16 KV, absolutely balanced MoE routing (its README), no MTP; its throughput, 2,324 output
  tokens/s per GPU, is InferSim's reading of the profile (alibaba/InferSim README). EP128 over
  256 experts leaves no room for redundant ones (256 / 128 = 2 per GPU). Priced with
  ``--routing balanced``.
- ``rtp-llm``: Alibaba RTP-LLM "DeepSeek Reproduce Tech Report" (H800, RoCE): prefill EP32,
  two 4K requests per GPU in 1.5 s (5,333 tokens/s per GPU); decode EP144 with 32 redundant
  experts and MTP, 13,200 concurrent requests (91.7 per GPU) at 4K in / 2K out (mean KV
  about 5,120) reach 20 tokens/s per user, 1,850 tokens/s per GPU.

- ``lmsys-gb200``: lmsys.org blog 2025-09-25 "Deploying DeepSeek on GB200 NVL72 with PD and
  Large Scale EP (Part II)" (reproduction: sgl-project/sglang issue #10903): DeepSeek V3/R1
  at 2,000-token inputs on one GB200 NVL72 rack; decode on 48 ranks, prefill instances of 4
  ranks (BF16 attention + FP8 MoE) and 2 ranks (FP8 attention + NVFP4 MoE and output
  projection); 18,471 / 9,087 and 26,156 / 13,386 input / output tokens/s per GPU. The NVFP4
  prefill instance offloads weights to host memory: ``--offload-mode cpu --offload-group-size
  2 --offload-num-in-group 1 --offload-prefetch-step 1`` in the reproduction's low-precision
  prefill command (copied in ai-dynamo/dynamo components/backends/sglang/slurm_jobs/scripts/
  gb200-fp4-prefill.sh), priced by :mod:`moeplan.cost.offload`. The decode
  batch "is chosen to make KV cache roughly full (... 1408 for 2k ISL)": the fp8 rows take
  1,408, the bf16-KV row the largest batch that fits (:func:`kv_full_batch`); prefill the
  H100 post's 16,384 tokens per GPU (the post follows its setup). Two-batch overlap off: the
  post overlaps the combine with the down GEMM and the shared experts instead (not priced).
  Decode places 32 redundant experts (the H100 post's EPLB) so that 288 slots divide over 48.

Routing: balanced placement (no per-expert loads of these runs are public) with random
routing within a batch — the busiest EP rank of each batch priced at the batch's token count
(:mod:`moeplan.cost.ep_spread`) — except DeepSeek's profile, which states balanced routing.

Unsourced steps (:data:`SENSITIVITY`): every row is priced again with each step that moves
it and has no engine line, profile or measurement behind it set to its alternatives — the
two-batch-overlap SM reserve (sourced for DeepGEMM, SGLang's cap; assumed for the attention
core; 24 SMs is DeepEP's README budget, SGLang's default is 20: cost/wideep.py), the
link-floor exponent of a communication kernel moved to another link (``LINK_FLOOR_EXPONENT``,
cost/kerneldb/fit.py) and the normal kernels' DeepEP transfer from one NVLink node to RDMA
(no held-out rows: it runs at 0.56-0.72 of DeepEP's published inter-node speed,
tests/test_cost_kerneldb_internode.py; the variant prices it at that published speed; the
low-latency kernels take DeepEP's published inter-node figures, cost/deepep_ll.py).

Run: ``PYTHONPATH=src python bench/bench_published.py`` (prints the table of
docs/benchmarks/published.md — with, for the lmsys prefill rows, the busiest-rank imbalance
at which the price would meet the published figure — the sensitivity table and the wide-EP
layer price rate); ``--plan`` adds ``moeplan plan`` on the lmsys cluster (12 x 8 H100, 2,000
prompt and 100 output tokens) against the blog's figures combined at the best P:D ratio,
100 / (2000 / 6,818 + 100 / 2,785) = 304 output tokens/s per GPU (a few minutes).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np

from moeplan.cost import wideep
from moeplan.cost.ep_spread import balanced_spread, max_of_normals, spread
from moeplan.cost.kerneldb import KernelDB, fit
from moeplan.cost.offload import WeightOffload, offload_memory
from moeplan.cost.provenance import pricing
from moeplan.errors import MoeplanError
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.layout import Layout
from moeplan.planners.placement.eplb import rebalance_experts
from moeplan.serve.iteration import phase
from moeplan.serve.iteration.instance_knobs import resolve_knobs
from moeplan.serve.iteration.phase import MicroBatch, PhaseModel
from moeplan.specs import ModelSpec, load_cluster, load_model

DSV3 = load_model("deepseek-v3")
#: NVIDIA's ModelOpt NVFP4 checkpoint of DeepSeek (routed experts and, per its
#: ``hf_quant_config.json``, every linear but the MLA down/up projections in NVFP4; fp8 KV)
NVFP4 = "nvidia--DeepSeek-V3.1-NVFP4"
_CONFIGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "configs"


def _model(name: str) -> ModelSpec:
    return DSV3 if name == "deepseek-v3" else load_model(str(_CONFIGS / name))


V3_MTP_ACCEPT = 0.85  # DeepSeek-V3 report §5.4.3: 85-90 % acceptance of the second token


class Deployment(NamedTuple):
    source: str
    cluster: str
    nodes: int
    ep: int
    redundant: int
    phase: str
    per_gpu: int
    context: int
    published: float
    mtp: int = 0
    note: str = ""
    routing: str = "random"
    model: str = "deepseek-v3"
    kv_dtype: str = "auto"
    tbo: bool = True
    a2a: str = "deepep"
    #: ``per_gpu`` of a decode row is the batch that fills the KV cache (``kv_full_batch``)
    fill_kv: bool = False
    #: the weight offload of the published run (``GROUP:NUM:PREFETCH``; "": none)
    offload: str = ""


DEPLOYMENTS = (
    Deployment("lmsys", "h100-sxm-8", 4, 32, 32, "prefill", 16384, 2048, 54_543 / 8),
    Deployment("lmsys", "h100-sxm-8", 4, 32, 32, "prefill", 16384, 4096, 50_302 / 8),
    Deployment(
        "lmsys", "h100-sxm-8", 4, 32, 32, "prefill", 16384, 4096, 59_337 / 8,
        note="simulated perfect EPLB (balanced routing)",
    ),
    Deployment("lmsys", "h100-sxm-8", 9, 72, 32, "decode", 256, 2000, 22_280 / 8),
    Deployment(
        "deepseek", "h800-sxm-8", 4, 32, 32, "prefill", 16384, 4096, 32_200 / 8,
        note="24-hour average, cache misses only",
    ),
    Deployment(
        "deepseek", "h800-sxm-8", 18, 144, 32, "decode", 88, 4989, 14_800 / 8, mtp=1,
        note="24-hour average; batch from 20-22 tok/s per user",
    ),
    Deployment("rtp-llm", "h800-sxm-8", 4, 32, 32, "prefill", 8192, 4096, 5333, note="RoCE"),
    Deployment(
        "rtp-llm", "h800-sxm-8", 18, 144, 32, "decode", 92, 5120, 1850, mtp=1,
        note="RoCE; at the 20 tok/s per-user SLA",
    ),
    Deployment(
        "deepseek-profile", "h800-sxm-8", 16, 128, 0, "decode", 128, 4096, 2324,
        note="profile-data; balanced routing", routing="balanced",
    ),
    Deployment(
        "lmsys-gb200", "gb200-nvl72", 18, 4, 0, "prefill", 16384, 2000, 18_471, tbo=False,
        kv_dtype="bf16", note="BF16 attention + FP8 MoE",
    ),
    Deployment(
        "lmsys-gb200", "gb200-nvl72", 18, 48, 32, "decode", 0, 2000, 9_087, tbo=False,
        kv_dtype="bf16", fill_kv=True, note="BF16 attention + FP8 MoE; batch fills the KV cache",
    ),
    Deployment(
        "lmsys-gb200", "gb200-nvl72", 18, 2, 0, "prefill", 16384, 2000, 26_156, tbo=False,
        kv_dtype="fp8", a2a="auto", model=NVFP4, note="FP8 attention + NVFP4 MoE; weight offload 2:1:1",
        offload="2:1:1",
    ),
    Deployment(
        "lmsys-gb200", "gb200-nvl72", 18, 48, 32, "decode", 1408, 2000, 13_386, tbo=False,
        kv_dtype="fp8", model=NVFP4, note="FP8 attention + NVFP4 MoE; batch 1,408 (the blog's)",
    ),
)  # fmt: skip


def _phase_model(d: Deployment, imbalance: float = 1.0) -> PhaseModel:
    c = load_cluster(d.cluster, d.nodes)
    md = _model(d.model)
    cm = engine_cost_model(c, engine="sglang")
    lay = Layout(attn_dp=d.ep, moe_ep=d.ep, redundant_experts=d.redundant)
    kn = resolve_knobs(
        "sglang", md, c, lay, a2a=d.a2a, tbo=d.tbo, mtp=d.mtp,
        mtp_accept=V3_MTP_ACCEPT if d.mtp else None, routing=d.routing, kv_dtype=d.kv_dtype,
        phase=d.phase, offload=WeightOffload.parse(d.offload) if d.offload else None,
    )  # fmt: skip
    return PhaseModel(md, c, cm, lay, kn, imbalance=imbalance)


def kv_full_batch(pm: PhaseModel, context: int, hi: int = 4096) -> int:
    """The most sequences per GPU whose KV at ``context`` tokens fits the GPU with the
    instance's weights, buffers and reserve (the phase model's memory check, bisection): the
    batch "chosen to make KV cache roughly full" of the GB200 part II blog."""
    lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            pm.memory(mid, context, mid)
            lo = mid
        except MoeplanError:
            hi = mid
    return lo


def batch(d: Deployment) -> int:
    """The row's sequences (decode) or prompt tokens (prefill) per GPU."""
    return kv_full_batch(_phase_model(d), d.context) if d.fill_kv else d.per_gpu


def label(d: Deployment) -> str:
    """The row's name in the sensitivity table."""
    name = f"{d.source} {d.phase} {d.context}"
    if "perfect" in d.note:
        name += " perfect EPLB"
    if d.source == "lmsys-gb200":
        name += " " + d.note.split(";")[0]
    return name


def price_sources(d: Deployment) -> dict[str, list[str]]:
    """Each operation the row's step priced and the sources of its prices (measured,
    interpolated, transferred, roofline: :func:`moeplan.cost.provenance.pricing`)."""
    pm = _phase_model(d)
    pm.step(d.phase, batch(d), d.context)
    return {op: sorted(cells) for op, cells in pricing(pm.cost)["ops"].items()}


def refusal(d: Deployment) -> str | None:
    """Why moeplan cannot price ``d``'s published setup (None: it can)."""
    try:
        _phase_model(d).step(d.phase, batch(d), d.context)
    except MoeplanError as e:
        return str(e)
    return None


def predict(d: Deployment) -> tuple[float, dict[str, float]]:
    """Tokens/s per GPU of ``d``'s phase and its breakdown (ms), balanced routing (the
    busiest rank of each batch at its token count); 0 and no breakdown where moeplan
    refuses the published setup (:func:`refusal` says why)."""
    try:
        r = _phase_model(d).step(d.phase, batch(d), d.context)
    except MoeplanError:
        return 0.0, {}
    return r.tokens_per_s_per_gpu, {k: v * 1e3 for k, v in r.breakdown.items()}


def implied_imbalance(d: Deployment, hi: float = 2.0, steps: int = 14) -> float | None:
    """The busiest EP rank's load over the mean (every MoE layer) at which moeplan's price
    equals the published figure (bisection; None when balanced routing is already slower or
    ``hi`` is not enough): a diagnostic of what the routing of the published run must have
    been if the rest of the price is right, never an input to a prediction."""

    def rate(x: float) -> float:
        return _phase_model(d, x).step(d.phase, d.per_gpu, d.context).tokens_per_s_per_gpu

    lo = 1.0
    if rate(lo) <= d.published or rate(hi) > d.published:
        return None
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rate(mid) > d.published else (lo, mid)
    return (lo + hi) / 2


#: the sources whose rows are held to 15 % (tests/test_serve_phase.py)
TARGETED = ("lmsys", "deepseek-profile", "lmsys-gb200")


#: the mean ratio of moeplan's inter-node DeepEP normal time to DeepEP's published one,
#: H800, over EP16-64 (tests/test_cost_kerneldb_internode.py); the low-latency kernels are
#: priced at DeepEP's published inter-node figures already (cost/deepep_ll.py)
DEEPEP_PUBLISHED_RATIO = 0.64


@contextmanager
def _patched(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _internode_at_published_speed() -> Callable:
    orig = wideep.WideEP._internode

    def scaled(self, q, op, kind, *args, **kw):  # type: ignore[no-untyped-def]
        t = orig(self, q, op, kind, *args, **kw)
        return t * DEEPEP_PUBLISHED_RATIO if kind == "normal" else t

    return scaled


#: the p90 held-out error the Blackwell tables are held to (docs/benchmarks/kerneldb-blackwell.md:
#: median <= 10 %, p90 <= 25 %): the alternative of a price with no measured row near it
UNMEASURED_ERROR = 0.25


def _unmeasured_scaled(factor: float) -> Callable:
    """:meth:`KernelDB.predict` with every kernel-table price that no measured row stands
    behind (``transferred`` from another GPU or shape range, or ``roofline``) times
    ``factor``; DeepEP's prices are varied on their own (:func:`_wide_nvlink_deepep_scaled`)."""
    orig = KernelDB.predict

    def scaled(self, op, device, engine="sglang", **shape):  # type: ignore[no-untyped-def]
        p = orig(self, op, device, engine, **shape)
        if p.source in ("transferred", "roofline") and not op.startswith("deepep"):
            return replace(p, seconds=p.seconds * factor)
        return p

    return scaled


def _wide_nvlink_deepep_scaled(factor: float) -> Callable:
    """DeepEP past the tables' 8 ranks inside one NVLink domain (an NVL72 rack: the
    intra-node model moved to more ranks, no measured row) times ``factor``."""
    orig = wideep.WideEP._internode

    def scaled(self, q, op, kind, *args, **kw):  # type: ignore[no-untyped-def]
        t = orig(self, q, op, kind, *args, **kw)
        return t * factor if q.ep <= self._cluster.nvlink_domain else t

    return scaled


def _host_link_scaled(factor: float) -> Callable:
    """The weight offload's copies over a host link ``factor`` times the GPU record's
    bandwidth (no table measures the offload's price)."""
    orig = PhaseModel.offload_transfers

    def scaled(self, off):  # type: ignore[no-untyped-def]
        secs, layers = orig(self, off)
        return [s / factor for s in secs], layers

    return scaled


#: the host link's alternatives (a GB200's NVLink-C2C, 450 GB/s per direction, +-25 %)
HOST_LINK_ERROR = 0.25

#: (label, object, attribute, value) of each alternative of an unsourced step
SENSITIVITY: tuple[tuple[str, object, str, Callable[[], object]], ...] = (
    ("TBO reserve 20 SMs (SGLang default)", wideep, "TBO_RESERVED_SMS", lambda: 20),
    ("TBO reserve not on attention", phase, "TBO_SLOWED", lambda: ("moe", "dense", "other")),
    ("no TBO reserve", wideep, "TBO_RESERVED_SMS", lambda: 0),
    ("link-floor exponent 0", fit, "LINK_FLOOR_EXPONENT", lambda: 0.0),
    ("link-floor exponent 1", fit, "LINK_FLOOR_EXPONENT", lambda: 1.0),
    ("inter-node DeepEP normal at published speed", wideep.WideEP, "_internode",
     _internode_at_published_speed),
    ("unmeasured kernel prices -25 %", KernelDB, "predict",
     lambda: _unmeasured_scaled(1 - UNMEASURED_ERROR)),
    ("unmeasured kernel prices +25 %", KernelDB, "predict",
     lambda: _unmeasured_scaled(1 + UNMEASURED_ERROR)),
    ("DeepEP past 8 NVLink ranks -25 %", wideep.WideEP, "_internode",
     lambda: _wide_nvlink_deepep_scaled(1 - UNMEASURED_ERROR)),
    ("DeepEP past 8 NVLink ranks +25 %", wideep.WideEP, "_internode",
     lambda: _wide_nvlink_deepep_scaled(1 + UNMEASURED_ERROR)),
    ("host link -25 %", PhaseModel, "offload_transfers",
     lambda: _host_link_scaled(1 - HOST_LINK_ERROR)),
    ("host link +25 %", PhaseModel, "offload_transfers",
     lambda: _host_link_scaled(1 + HOST_LINK_ERROR)),
)  # fmt: skip


def sensitivity() -> list[tuple[Deployment, float, list[float]]]:
    """Each deployment's ratio to the published figure as priced and under each alternative
    of :data:`SENSITIVITY` (one at a time)."""
    base = [predict(d)[0] / d.published for d in DEPLOYMENTS]
    alts: list[list[float]] = [[] for _ in DEPLOYMENTS]
    for _, obj, name, value in SENSITIVITY:
        with _patched(obj, name, value()):
            for i, d in enumerate(DEPLOYMENTS):
                alts[i].append(predict(d)[0] / d.published)
    return [(d, b, a) for d, b, a in zip(DEPLOYMENTS, base, alts, strict=True)]


#: the lmsys blog's prefill (2K) and decode figures per GPU combined at the best P:D ratio for
#: 2,000-token prompts and 100 output tokens
PLAN_PUBLISHED = 100 / (2000 / (54_543 / 8) + 100 / (22_280 / 8))
PLAN_ARGS = (
    "plan", "--model", "deepseek-v3", "--cluster", "h100-sxm-8", "--nodes", "12",
    "--isl", "2000", "--osl", "100", "--json",
)  # fmt: skip


def plan_row() -> tuple[str, float, dict]:
    """``moeplan plan`` on the lmsys cluster: the winner's label, its simulated output
    tokens/s per GPU and its metrics."""
    out = subprocess.run(
        [sys.executable, "-m", "moeplan", *PLAN_ARGS], capture_output=True, text=True, check=True
    )
    w = json.loads(out.stdout)["winner"]
    return w["label"], w["metrics"]["output_tokens_per_s_per_gpu"], w["metrics"]


def layer_price_rate(n: int = 200_000) -> tuple[float, float]:
    """Memoised wide-EP layer prices per second (a decode sweep's repeated shapes), and the
    first-call (cold) rate over distinct token counts."""
    c = load_cluster("h100-sxm-8", 9)
    w = engine_cost_model(c, engine="sglang").wide_ep
    assert w is not None
    t0 = time.perf_counter()
    for i in range(200):
        w.moe(DSV3, 64 + i, 72, redundant=32, phase="generation")
    cold = 200 / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for i in range(n):
        w.moe(DSV3, 64 + i % 200, 72, redundant=32, phase="generation")
    return n / (time.perf_counter() - t0), cold


def _dict_rate(n: int = 200_000) -> float:
    """A bare dictionary look-up loop of ``n`` calls: the memo's floor, in the same run."""
    memo = {(i, 72): i for i in range(200)}
    t0 = time.perf_counter()
    for i in range(n):
        memo.get((i % 200, 72))
    return n / (time.perf_counter() - t0)


def run() -> list[dict]:
    """Rows for bench/run_all.py: predicted vs published per deployment, and the layer rate."""
    rows = []
    for d in DEPLOYMENTS:
        got, _ = predict(d)
        rows.append(
            {
                "name": f"{d.source} {d.cluster} {d.phase} EP{d.ep} x{batch(d)} ctx {d.context}"
                + (" (perfect EPLB)" if "perfect" in d.note else "")
                + (f" ({d.note.split(';')[0]})" if d.source == "lmsys-gb200" else ""),
                "value": got,
                "unit": "tokens/s per GPU (predicted)",
                "reference": d.published,
                "ratio": got / d.published,
                "target": "within 15 %" if d.source in TARGETED else "",
                "note": refusal(d) or d.note or "published",
            }
        )
    buf = io.StringIO()
    with redirect_stdout(buf):
        report()
    rows.append(
        {
            "name": "printed tables",
            "value": len(DEPLOYMENTS),
            "unit": "rows",
            "note": buf.getvalue(),
        }
    )
    memo, cold = layer_price_rate()
    floor = _dict_rate()
    rows.append(
        {
            "name": "wide-EP layer price (memoised)",
            "value": memo,
            "unit": "evaluations/s",
            "reference": floor,
            "ratio": memo / floor,
            "target": ">= 100k/s",
            "note": f"cold {cold:,.0f}/s; reference: bare dict look-ups",
        }
    )
    return rows


def main() -> None:
    report()
    plan()


def _derived() -> None:
    """The figures the doc's prose reads off the rows: the lmsys figures per node, the batch
    spread of the lmsys micro-batches, the balancedness the implied imbalances mean, the
    prefill step's growth from 2K to 4K and DeepSeek's decode batch from its per-user rate."""
    pre2, pre4, perfect, dec = DEPLOYMENTS[:4]
    print(
        "\nlmsys published per node: prefill "
        + ", ".join(f"{d.context} {d.published * 8:,.0f}" for d in (pre2, pre4, perfect))
        + f" (perfect EPLB last, {perfect.published / pre4.published:.2f}x the run with the "
        f"data's distribution); decode {dec.published * 8:,.0f}"
    )
    k, e = DSV3.top_k, DSV3.num_experts
    t_pre, t_dec = pre2.per_gpu // 2 * pre2.ep, dec.per_gpu // 2 * dec.ep  # one micro-batch
    print(
        f"batch spread (busiest rank / mean): prefill {pre2.per_gpu // 2:,} tokens per GPU per "
        f"micro-batch over EP{pre2.ep} ({t_pre:,} tokens) {balanced_spread(t_pre, pre2.ep, k, e):.3f}; "
        f"decode {dec.per_gpu // 2} sequences per micro-batch over EP{dec.ep} ({t_dec:,} tokens, "
        f"{t_dec * k // dec.ep:,} routed copies per rank) {balanced_spread(t_dec, dec.ep, k, e):.3f}"
    )
    imps = [implied_imbalance(d) for d in (pre2, pre4)]
    print(
        "balancedness the published prefill runs imply (1 / implied imbalance): "
        + " / ".join(f"{1 / x:.2f}" for x in imps if x)
    )
    print(
        f"prefill step 2K -> 4K: predicted +{predict(pre2)[0] / predict(pre4)[0] - 1:.1%}, "
        f"published -{1 - pre4.published / pre2.published:.1%} in throughput"
    )
    pm = _phase_model(pre2)
    att = [
        dict(pm.steps(MicroBatch((n, isl, isl)), layers=1))["attention"] * 1e3
        for n, isl in ((pre2.per_gpu // 2 // 2048, 2048), (pre2.per_gpu // 2 // 4096, 4096))
    ]
    print(
        f"prefill attention per layer (MLA with its projections) at 4 x 2,048 vs 2 x 4,096 "
        f"tokens per micro-batch: {att[0]:.2f} vs {att[1]:.2f} ms (+{att[1] / att[0] - 1:.0%})"
    )
    bal = predict(dec._replace(routing="balanced"))[0]
    print(
        f"lmsys decode balanced -> random routing: {bal:,.0f} -> {predict(dec)[0]:,.0f} "
        f"({bal / dec.published:.2f} -> {predict(dec)[0] / dec.published:.2f}); the busiest of "
        f"{dec.ep} ranks {max_of_normals(dec.ep):.2f} standard deviations above the mean"
    )
    # uniform expert popularity placed by the project's EPLB (serve/iteration/balance.py)
    slots = e + dec.redundant
    phy2log, _, logcnt = rebalance_experts(np.ones((1, e)), slots, DSV3.n_group, dec.nodes, dec.ep)
    per_gpu = (1.0 / logcnt[0][phy2log[0]]).reshape(dec.ep, -1).sum(axis=1)
    top = per_gpu.max() / per_gpu.mean()
    print(
        f"uniform popularity under EPLB at EP{dec.ep}: {slots // dec.ep} slots per GPU, "
        f"{int((per_gpu == per_gpu.max()).sum())} of {dec.ep} GPUs at {top:.3f}x the mean; times "
        f"the batch spread {top * balanced_spread(t_dec, dec.ep, k, e):.3f}, the spread on the "
        f"placement's shares {spread(t_dec, per_gpu / per_gpu.sum(), k, e):.3f}"
    )
    comb = 100 / (2000 / predict(pre2)[0] + 100 / predict(dec)[0])
    print(
        f"lmsys prefill 2K and decode combined at the best P:D ratio for 2,000 / 100 tokens: "
        f"100 / (2000 / {predict(pre2)[0]:,.0f} + 100 / {predict(dec)[0]:,.0f}) = {comb:.0f} "
        f"output tokens/s per GPU vs {PLAN_PUBLISHED:.0f} from the published figures "
        f"({comb / PLAN_PUBLISHED:.2f})"
    )
    ds = DEPLOYMENTS[5]
    per_user = 21  # tokens/s per user: the middle of DeepSeek's published 20-22
    steps = 1 + V3_MTP_ACCEPT
    print(
        f"DeepSeek decode batch: {ds.published:,.0f} / {per_user} tokens/s per user = "
        f"{ds.published / per_user:.0f} sequences per GPU; with MTP's {steps:.2f} tokens per "
        f"step a step of {steps / per_user * 1e3:.0f} ms"
    )


def offload_line(d: Deployment) -> str:
    """The weight offload of ``d``'s run: what it moves, its copies per step, the step's wait
    for them, the smallest offload moeplan's ``auto`` picks instead, and the row at half the
    host link (the two GPUs of a GB200 superchip sharing one C2C link)."""
    pm = _phase_model(d)
    off = pm.knobs.offload
    assert off is not None
    secs, layers = pm.offload_transfers(off)
    m, gib = pm.model, 1024**3
    local = (m.num_experts + d.redundant) / d.ep
    om = offload_memory(m, off, range(m.num_layers), local)
    need = pm.memory_need(d.phase, d.per_gpu, d.context, None)
    auto = pm.fit_offload(d.phase, d.per_gpu, d.context)
    moved = sum(1 for i in layers if m.is_moe_layer(i))
    with _patched(PhaseModel, "offload_transfers", _host_link_scaled(0.5)):
        half = predict(d)[0] / d.published
    _, parts = predict(d)
    return (
        f"weight offload {off.label}: {need / gib:.1f} GiB per GPU without it; {len(layers)} of "
        f"{m.num_layers} layers offloaded ({moved} MoE), {om.offloaded / gib:.1f} GiB of routed "
        f"experts on the host, {om.buffers / gib:.1f} GiB of prefetch buffers; copies "
        f"{max(secs) * 1e3:.1f} ms per layer, {sum(secs) * 1e3:.1f} ms per step at "
        f"{pm.cluster.gpu.host_link_bw / 1e9:.0f} GB/s per direction; the step waits "
        f"{parts.get('offload', 0.0):.1f} ms; auto picks {auto.label if auto else 'none'}; "
        f"at half the host link the row is {half:.3f}"
    )


def report() -> None:
    """Print the tables of docs/benchmarks/published.md (the published rows, the GB200 rows'
    step by part and price sources, the sensitivity table) and the layer price rate."""
    print(
        "| source | GPU | phase | layout | per GPU | context | published | predicted | ratio "
        "| implied imbalance |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in DEPLOYMENTS:
        got, _ = predict(d)
        lay = f"EP{d.ep}+R{d.redundant}, {d.nodes} nodes" + (f", MTP{d.mtp}" if d.mtp else "")
        if d.source == "lmsys-gb200":
            lay = f"EP{d.ep}+R{d.redundant}, {d.note.split(';')[0]}"
        imp = implied_imbalance(d) if d.source == "lmsys" and d.phase == "prefill" else None
        res = f"{got:,.0f} | {got / d.published:.2f}" if got else "refused | "
        print(
            f"| {d.source}{', perfect EPLB' if 'perfect' in d.note else ''} | "
            f"{d.cluster.split('-')[0].upper()} | {d.phase} | {lay} | "
            f"{batch(d)} | {d.context} | {d.published:,.0f} | {res} | "
            f"{'' if imp is None else f'{imp:.3f}'} |"
        )
    _derived()
    print("\nGB200 rows: the step (ms) by part and the sources of each operation's prices:\n")
    for d in DEPLOYMENTS:
        if d.source != "lmsys-gb200":
            continue
        why = refusal(d)
        if why is not None:
            print(f"- {label(d)}: refused: {why}")
            continue
        _, parts = predict(d)
        step = ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
        srcs = "; ".join(f"{op} {'/'.join(v)}" for op, v in price_sources(d).items())
        print(f"- {label(d)}: {step} (step {sum(parts.values()):.1f}); prices: {srcs}")
        if d.offload:
            print(f"  {offload_line(d)}")
    print("\nSensitivity to the unsourced steps (ratio to the published figure):\n")
    print(
        f"TBO reserve as priced {wideep.TBO_RESERVED_SMS} SMs; inter-node DeepEP normal at "
        f"{DEEPEP_PUBLISHED_RATIO} of DeepEP's published time; unmeasured prices "
        f"+-{UNMEASURED_ERROR}\n"
    )
    print("| row | as priced | " + " | ".join(lab for lab, *_ in SENSITIVITY) + " |")
    print("|---" * (len(SENSITIVITY) + 2) + "|")
    for d, b, alts in sensitivity():
        if not b:
            continue
        print(f"| {label(d)} | {b:.3f} | " + " | ".join(f"{a:.3f}" for a in alts) + " |")
    memo, cold = layer_price_rate()
    print(f"\nwide-EP layer price: {memo:,.0f} memoised evaluations/s, {cold:,.0f} cold/s")


def plan() -> None:
    """With ``--plan``: ``moeplan plan`` on the lmsys cluster against the blog's figures;
    ``--plan --record`` also writes that row to ``docs/benchmarks/data/published-plan.json``
    (the figures record the docs quote it from)."""
    if "--plan" in sys.argv[1:]:
        winner, got, m = plan_row()
        if "--record" in sys.argv[1:]:
            row = {
                "name": f"moeplan {' '.join(PLAN_ARGS[:-1])}",
                "value": got,
                "unit": "output tokens/s per GPU (simulated)",
                "reference": PLAN_PUBLISHED,
                "ratio": got / PLAN_PUBLISHED,
                "target": "within 25 %",
                "winner": winner,
                "metrics": {k: m[k] for k in ("goodput_rps", "ttft_p90_s", "tpot_p90_s")},
            }
            doc = {
                "command": "python bench/bench_published.py --plan --record",
                "date": time.strftime("%Y-%m-%d", time.gmtime()),
                "kind": "bench",
                "load_average": round(os.getloadavg()[0], 2),
                "rows": [row],
            }
            out = Path(__file__).parents[1] / "docs" / "benchmarks" / "data" / "published-plan.json"
            out.write_text(json.dumps(doc, indent=1) + "\n")
        print(
            f"\nmoeplan {' '.join(PLAN_ARGS[:-1])}: {winner}: {got:,.1f} output tokens/s per "
            f"GPU at {m['goodput_rps']:.1f} requests/s (TTFT p90 {m['ttft_p90_s']:.2f} s, "
            f"TPOT p90 {m['tpot_p90_s'] * 1e3:.0f} ms) vs {PLAN_PUBLISHED:,.0f} published: "
            f"{got / PLAN_PUBLISHED:.2f} (target within 25 %)"
        )


if __name__ == "__main__":
    main()
