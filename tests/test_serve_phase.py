"""Phase questions (serve/iteration/phase.py, serve-sim --phase) against closed forms, the overlap
mechanism's bounds and the published SGLang 96 x H100 DeepSeek-V3 deployment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import run_main
from moeplan.cost import memory as mem
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import InstanceKnobs, resolve_knobs
from moeplan.serve.iteration.phase import BREAKDOWN_KEYS, PhaseModel
from moeplan.serve.layout import stage_weight_bytes
from moeplan.specs import load_cluster, load_model

DSV3 = load_model("deepseek-v3")


def _model(nodes: int, ep: int, r: int, **kw) -> PhaseModel:
    c = load_cluster("h100-sxm-8", nodes)
    lay = Layout(attn_dp=ep, moe_ep=ep, redundant_experts=r)
    kn = resolve_knobs("sglang", DSV3, c, lay, a2a="deepep", **kw)
    return PhaseModel(DSV3, c, engine_cost_model(c, engine="sglang"), lay, kn)


@pytest.fixture(scope="module")
def decode72():
    return _model(9, 72, 32, tbo=True)


def test_breakdown_sums_to_the_step(decode72):
    for tbo in (True, False):
        pm = _model(9, 72, 32, tbo=tbo)
        r = pm.step("decode", 128, 2000)
        assert set(BREAKDOWN_KEYS) <= set(r.breakdown)
        assert sum(r.breakdown.values()) == pytest.approx(r.step_s, rel=1e-12)
        assert ("overlap" in r.breakdown) == tbo and r.breakdown.get("overlap", 0.0) <= 0.0


def test_two_batch_overlap_within_its_bounds():
    """The overlapped step is no shorter than the busier resource of the two halves and no
    longer than the halves one after the other."""
    pm = _model(9, 72, 32, tbo=True)
    r = pm.step("decode", 256, 2000)
    b = r.breakdown
    comm = b["dispatch"] + b["combine"]
    compute = b["attention"] + b["moe"] + b["dense"]
    assert r.step_s >= max(comm, compute) - 1e-12
    assert r.step_s <= comm + compute + b["other"] + 1e-12


@pytest.mark.parametrize("n,p", [(1, 0.8), (2, 0.7), (3, 1.0)])
def test_mtp_tokens_per_step_closed_form(n, p):
    kn = InstanceKnobs(mtp=n, mtp_accept=p)
    want = n + 1 if p == 1.0 else (1 - p ** (n + 1)) / (1 - p)
    assert kn.tokens_per_step == pytest.approx(want, rel=1e-12)


def test_mtp_step_is_draft_plus_verify(decode72):
    plain = decode72.step("decode", 64, 2000)
    pm = _model(9, 72, 32, tbo=True, mtp=2, mtp_accept=0.8)
    r = pm.step("decode", 64, 2000)
    assert r.tokens_per_step == pytest.approx(1 + 0.8 + 0.64)
    assert r.step_s > plain.step_s and r.breakdown["other"] > plain.breakdown["other"]


def test_fp8_kv_halves_the_cache_and_redundant_experts_cost_memory():
    c = load_cluster("h100-sxm-8", 9)
    cm = engine_cost_model(c, engine="sglang")
    lay0 = Layout(attn_dp=72, moe_ep=72, redundant_experts=32)
    kv = {}
    for dt in ("bf16", "fp8"):
        kn = resolve_knobs("sglang", DSV3, c, lay0, a2a="deepep", kv_dtype=dt)
        kv[dt] = PhaseModel(DSV3, c, cm, lay0, kn).memory(64, 2000, 64)["kv_cache"]
    assert kv["fp8"] == pytest.approx(kv["bf16"] / 2)
    lay8 = Layout(attn_dp=8, moe_ep=8)
    extra = stage_weight_bytes(
        DSV3, Layout(attn_dp=8, moe_ep=8, redundant_experts=8), range(61), True, True
    ) - stage_weight_bytes(DSV3, lay8, range(61), True, True)
    per_expert = mem.expert_weight_bytes(DSV3, 1) - mem.expert_weight_bytes(DSV3, 0)
    assert extra == pytest.approx(per_expert * len(DSV3.moe_layers))  # one replica per GPU


# ---- the published deployment (lmsys.org 2025-05-05, 96 x H100, DeepSeek-V3) ----------
def _cli(capsys, *args):
    return run_main(capsys, *args)


def _phase(capsys, nodes, ep, *rest):
    code, out, err = _cli(
        capsys, "serve-sim", "--model", "deepseek-v3", "--cluster", "h100-sxm-8",
        "--nodes", str(nodes), "--attn-dp", str(ep), "--moe-ep", str(ep),
        "--redundant-experts", "32", "--a2a", "deepep", "--tbo", *rest, "--json",
    )  # fmt: skip
    assert code == 0, out + err
    return json.loads(out)


def test_published_decode_keys(capsys):
    """Decode EP72 over 9 nodes, 32 redundant experts, 256 requests per GPU at KV 2,000:
    fixed JSON keys, the breakdown summing to the step."""
    d = _phase(capsys, 9, 72, "--phase", "decode", "--batch-per-gpu", "256", "--context", "2000")
    assert {"phase", "step_ms", "tokens_per_s_per_gpu", "batch_per_gpu", "context"} <= set(d)
    assert set(BREAKDOWN_KEYS) <= set(d["breakdown_ms"])
    assert sum(d["breakdown_ms"].values()) == pytest.approx(d["step_ms"], rel=1e-9)


DECODE_MISSED = "bar missed: predicted 3,373 vs 2,785 published, ratio 1.211"


@pytest.mark.xfail(strict=True, reason=DECODE_MISSED)
def test_published_decode_within_15_percent(capsys):
    """The lmsys decode row (2,785 output tokens/s per GPU published) with DeepEP's
    low-latency kernels across nodes at DeepEP's published H800 figures
    (cost/deepep_ll.py): 1.211 of the published figure, a strict xfail that fails the day
    it passes."""
    d = _phase(capsys, 9, 72, "--phase", "decode", "--batch-per-gpu", "256", "--context", "2000")
    assert d["tokens_per_s_per_gpu"] == pytest.approx(2785, rel=0.15)


def test_deepseek_decode_profile_within_15_percent(capsys):
    """deepseek-ai/profile-data decoding: EP128 over 16 nodes of H800, 128 requests per GPU
    at a 4K prompt, bf16 KV, balanced routing, two micro-batches; 2,324 output tokens/s per
    GPU (InferSim's README). Predicted 2,044 (0.880)."""
    code, out, err = _cli(
        capsys, "serve-sim", "--model", "deepseek-v3", "--cluster", "h800-sxm-8",
        "--nodes", "16", "--attn-dp", "128", "--moe-ep", "128", "--a2a", "deepep", "--tbo",
        "--routing", "balanced", "--kv-dtype", "bf16", "--phase", "decode",
        "--batch-per-gpu", "128", "--context", "4096", "--json",
    )  # fmt: skip
    assert code == 0, out + err
    d = json.loads(out)
    assert d["knobs"]["routing"] == "balanced"
    assert d["tokens_per_s_per_gpu"] == pytest.approx(2324, rel=0.15)


MISSED = "bar missed: predicted 7,455 vs 6,288 published, ratio 1.186"


@pytest.mark.parametrize(
    "isl,published,rel",
    [
        (2048, 6818, 0.15),
        pytest.param(4096, 6288, 0.15, marks=pytest.mark.xfail(strict=True, reason=MISSED)),
        (4096, 7417, 0.05),
    ],
)
def test_published_prefill(capsys, isl, published, rel):
    """Prefill EP32 over 4 nodes, 16,384 tokens per GPU. Published: 54,543 / 50,302 input
    tokens/s per node (6,818 / 6,288 per GPU) at 2K / 4K prompts with the expert distribution
    of their data, and 59,337 per node (7,417 per GPU) at 4K with simulated perfect EPLB —
    balanced routing, what moeplan prices without a routing trace: held to 5 %. The first two
    carry the deployment's expert imbalance, which needs a routing trace (none is public);
    they are held to the published rows' 15 % target (docs/benchmarks/published.md): the 2K
    row meets it (1.127), the 4K row misses it (1.186) and is a strict xfail, so it fails
    loudly the day it starts to pass."""
    d = _phase(capsys, 4, 32, "--phase", "prefill", "--tokens-per-gpu", "16384", "--isl", str(isl))
    assert d["tokens_per_gpu"] == 16384 and d["context"] == isl
    assert d["tokens_per_s_per_gpu"] == pytest.approx(published, rel=rel)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--moe-ep", "72", "--attn-dp", "72", "--redundant-experts", "30", "--phase", "decode",
          "--batch-per-gpu", "8", "--context", "100"], "must divide"),
        (["--moe-ep", "8", "--attn-dp", "8", "--phase", "decode", "--batch-per-gpu", "8",
          "--context", "100", "--mtp", "1", "--mtp-accept", "0"], "(0, 1]"),
        (["--moe-ep", "8", "--attn-dp", "8", "--phase", "decode", "--context", "100"],
         "--batch-per-gpu"),
        (["--moe-ep", "8", "--attn-dp", "8", "--a2a", "nccl", "--tbo", "--phase", "decode",
          "--batch-per-gpu", "8", "--context", "100"], "--tbo"),
    ],
)  # fmt: skip
def test_bad_phase_input_is_one_line_exit_2(capsys, args, needle):
    code, out, err = _cli(
        capsys, "serve-sim", "--model", "deepseek-v3", "--cluster", "h100-sxm-8", "--nodes", "9",
        *args,
    )  # fmt: skip
    text = (out + err).strip()
    assert code == 2 and needle in text and "\n" not in text, text


def test_deepep_refused_where_it_cannot_run(capsys):
    code, out, err = _cli(
        capsys, "serve-sim", "--model", "deepseek-v3", "--cluster", "a100-sxm-8", "--nodes", "4",
        "--attn-dp", "32", "--moe-ep", "32", "--a2a", "deepep", "--phase", "decode",
        "--batch-per-gpu", "8", "--context", "100",
    )  # fmt: skip
    assert code == 2 and "SM90" in out + err


# ---- SGLang on GB200 NVL72, part II (lmsys.org 2025-09-25, DeepSeek V3/R1, 2,000-token inputs) --
NVFP4_CKPT = str(Path(__file__).parent / "data" / "configs" / "nvidia--DeepSeek-V3.1-NVFP4")


def _gb200(capsys, model, ep, kv, *rest):
    """``serve-sim --phase`` on one GB200 NVL72 rack at the blog's layout: attention DP = EP,
    no two-batch overlap (the blog overlaps the combine with the down GEMM instead, which
    moeplan does not price), KV in ``kv``."""
    redundant = ["--redundant-experts", "32"] if ep == 48 else []
    return _cli(
        capsys, "serve-sim", "--model", model, "--cluster", "gb200-nvl72",
        "--attn-dp", str(ep), "--moe-ep", str(ep), *redundant, "--kv-dtype", kv, *rest, "--json",
    )  # fmt: skip


def test_gb200_bf16_attention_fp8_moe_prefill_within_15_percent(capsys):
    """Prefill instances of 4 ranks, BF16 attention + FP8 MoE, 16,384 prompt tokens per GPU
    at 2,000-token prompts (the H100 blog's setup, which the post follows): 18,471 input
    tokens/s per GPU published; predicted 18,642 (1.009)."""
    code, out, err = _gb200(
        capsys, "deepseek-v3", 4, "bf16", "--a2a", "deepep", "--phase", "prefill",
        "--tokens-per-gpu", "16384", "--isl", "2000",
    )  # fmt: skip
    assert code == 0, out + err
    assert json.loads(out)["tokens_per_s_per_gpu"] == pytest.approx(18471, rel=0.15)


def test_gb200_bf16_attention_fp8_moe_decode_within_15_percent(capsys):
    """Decode on 48 ranks (32 redundant experts: 288 slots over 48), BF16 attention + FP8 MoE,
    the batch that fills the KV cache at 2,000 tokens (1,135 sequences per GPU in bf16 KV;
    1,136 does not fit): 9,087 output tokens/s per GPU published; predicted 9,462 (1.041)."""
    code, out, err = _gb200(
        capsys, "deepseek-v3", 48, "bf16", "--a2a", "deepep", "--phase", "decode",
        "--batch-per-gpu", "1135", "--context", "2000",
    )  # fmt: skip
    assert code == 0, out + err
    assert json.loads(out)["tokens_per_s_per_gpu"] == pytest.approx(9087, rel=0.15)
    code, out, err = _gb200(
        capsys, "deepseek-v3", 48, "bf16", "--a2a", "deepep", "--phase", "decode",
        "--batch-per-gpu", "1136", "--context", "2000",
    )  # fmt: skip
    assert code == 2 and "GiB per GPU" in out + err


def test_gb200_fp8_attention_nvfp4_moe_prefill_within_15_percent(capsys):
    """Prefill instances of 2 ranks, FP8 attention + NVFP4 MoE: 26,156 input tokens/s per GPU
    published. The NVFP4 checkpoint needs 198.7 GiB per GPU on 2 GB200s (185 GiB usable);
    the reproduction offloads the routed experts of every second layer to host memory
    (``--offload-group-size 2 --offload-num-in-group 1 --offload-prefetch-step 1``), priced
    over the NVLink-C2C link; the fused MoE's EP runs SGLang's gather (an all-reduce of both
    ranks' tokens) and reduce-scatter, not an all-to-all: 24,452 predicted (0.935)."""
    code, out, err = _gb200(
        capsys, NVFP4_CKPT, 2, "fp8", "--phase", "prefill", "--tokens-per-gpu", "16384",
        "--isl", "2000", "--weight-offload", "2:1:1",
    )  # fmt: skip
    assert code == 0, out + err
    got = json.loads(out)
    assert got["weight_offload"]["flags"] == "2:1:1"
    assert got["tokens_per_s_per_gpu"] == pytest.approx(26156, rel=0.15)


def test_gb200_fp8_attention_nvfp4_moe_decode_within_15_percent(capsys):
    """Decode on 48 ranks, FP8 attention + NVFP4 MoE, 1,408 sequences per GPU (the blog's
    batch for 2K inputs): 13,386 output tokens/s per GPU published; SGLang runs the NVFP4
    experts under DeepEP's low-latency dispatch (``flashinfer_cutedsl``): predicted 11,872
    (0.887)."""
    code, out, err = _gb200(
        capsys, NVFP4_CKPT, 48, "fp8", "--a2a", "deepep", "--phase", "decode",
        "--batch-per-gpu", "1408", "--context", "2000",
    )  # fmt: skip
    assert code == 0, out + err
    assert json.loads(out)["tokens_per_s_per_gpu"] == pytest.approx(13386, rel=0.15)


def test_nvfp4_deepep_refused_in_prefill_one_line(capsys):
    """The same NVFP4 checkpoint on DeepEP in prefill: DeepEP's normal dispatch has no NVFP4
    handler in SGLang, so ``--a2a deepep`` is one line naming the rule, exit 2."""
    code, out, err = _gb200(
        capsys, NVFP4_CKPT, 4, "fp8", "--a2a", "deepep", "--phase", "prefill",
        "--tokens-per-gpu", "16384", "--isl", "2000",
    )  # fmt: skip
    text = (out + err).strip()
    assert code == 2 and "\n" not in text, text
    assert "low-latency dispatch only (decode), not in prefill" in text
    assert "flashinfer_cutedsl.py:624-626" in text
