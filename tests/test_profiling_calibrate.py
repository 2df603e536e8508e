"""Profiling: timer discipline, model-derived shapes vs the cost model, fits, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from moeplan.cost import CostModel, HardwareProfile
from moeplan.cost import elementwise as ew
from moeplan.cost.kernel_fits import MoeShape
from moeplan.cost.linear import AlphaBeta, Roofline
from moeplan.profiling import calibrate as cal
from moeplan.profiling.shapes import (
    attention_gemms,
    attention_shapes,
    attention_views,
    expert_gemms,
)
from moeplan.profiling.timing import median_time, random_inputs
from moeplan.specs import load_cluster, load_model, model_names
from moeplan.specs.quant import UNQUANTIZED


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moeplan", *args], capture_output=True, text=True, timeout=300
    )


def test_timer_warms_up_and_rotates_inputs():
    """Warm-up calls come first, then timed calls cycle through the input copies."""
    seen: list[int] = []
    inputs = [(i,) for i in range(3)]
    t = median_time(seen.append, inputs, device=torch.device("cpu"), warmup=2, repeats=5)
    assert seen == [0, 1, 2, 0, 1, 2, 0] and t >= 0


def test_random_inputs_are_fresh_and_nonzero():
    sets = random_inputs(
        [(64, 32)],
        dtype=torch.float32,
        device=torch.device("cpu"),
        gen=torch.Generator().manual_seed(0),
    )
    assert len(sets) == 2 and not torch.equal(sets[0][0], sets[1][0])
    assert all(bool((s[0] != 0).all()) for s in sets)


@pytest.mark.parametrize("name", model_names())
def test_shapes_are_what_the_cost_model_prices(name):
    """Summing the GEMM model over our shapes reproduces CostModel's attention/expert terms.
    Calibration times bf16 GEMMs, so the model is compared with its weights unquantized (the
    cost model prices a quantized checkpoint's bytes and rate on top of these shapes)."""
    model = replace(load_model(name), quant=UNQUANTIZED)
    cm = CostModel(load_cluster("h100-sxm-8"))
    dims = {(v.num_attention_heads, v.num_kv_heads, v.head_dim) for v in attention_views(model)}
    seen: set[int] = set()
    for layer in range(model.num_layers):  # each distinct layer view: its own heads, head dim
        view = cm.layer_model(model, layer)
        if id(view) in seen:
            continue
        seen.add(id(view))
        assert (view.num_attention_heads, view.num_kv_heads, view.head_dim) in dims  # timed
        for t in (1, 300, 4096):
            proj = sum(cm.gemm(*s) for s in attention_gemms(view, t))
            # the block less its core and its element-wise passes (RoPE, QK-norm: not GEMMs)
            want = (
                cm.attention_layer(model, 1, t, t, layer=layer, hc=False)
                - cm.attention_core(model, 1, t, t, layer=layer)
                - cm.elementwise(t * ew.attention_bytes(view, 1))
            )
            assert proj == pytest.approx(want, rel=1e-12), (layer, t)
        (m, n1, k1), (_, n2, k2) = expert_gemms(model, t)[:2]
        assert cm.gemm(m, n1, k1) + cm.gemm(m, n2, k2) == pytest.approx(cm.expert_ffn(model, m, 1))
        shared = sum(cm.gemm(*s) for s in expert_gemms(model, t)[2:])
        act = cm.elementwise(t * ew.swiglu_act_bytes(model.shared_intermediate_size))
        if not model.shared_intermediate_size:  # no shared expert: nothing priced
            act = 0.0
        assert shared + act == pytest.approx(cm.shared_expert(model, t))  # SwiGLU's silu * up


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-235b-a22b"])
def test_attention_units_match_cost_model(name):
    """AttnShape.macs is the x of the cost model's attention α-β (β = 1, α = 0)."""
    model = load_model(name)
    prof = HardwareProfile(
        name="x",
        source="t",
        gemm=Roofline(alpha=0, flops=1, bw=1),
        attention=AlphaBeta(alpha=0.0, beta=1.0),
    )
    cm = CostModel(load_cluster("h100-sxm-8"), prof)
    for s in attention_shapes(model, [128, 1000], [1, 3]):
        assert s.macs == pytest.approx(cm.attention_core(model, s.num_seqs, s.q_len, s.ctx_len))


def test_fit_recovers_known_models():
    """Measurements generated from a known roofline and α-β are fitted back (held-out APE ~0)."""
    roof, attn = Roofline(alpha=4e-6, flops=6e14, bw=2.5e12), AlphaBeta(alpha=1e-5, beta=3e-14)
    rng = np.random.default_rng(0)
    meas = cal.Measurements(copy_bw=3e12, gemm_flops=7e14)
    for _ in range(80):
        m, n, k = (int(v) for v in rng.integers(1, 8192, 3))
        meas.gemm.append((m, n, k, roof(m, n, k)))
        x = float(rng.uniform(1e6, 1e12))
        meas.attention.append((x, attn(x)))
        meas.permute.append((x, attn(x)))
    meas.expert.append((64, 8, 1024, 512, 1e-4))
    profile, report = cal.fit(meas, "t", "synthetic", load_cluster("h100-sxm-8"))
    rows = {r.op: r.quality for r in report}
    for op in ("gemm", "attention", "permute"):
        assert rows[op].heldout_median_ape < 1e-3, op
        assert rows[op].n_heldout > 0
    assert profile.attention.beta == pytest.approx(attn.beta, rel=1e-3)
    assert set(profile.quality) == {"gemm", "attention", "permute", "expert_ffn"}


@pytest.fixture(scope="module")
def quick_cpu(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "profile.json"
    p = run(
        "calibrate", "--device", "cpu", "--quick", "--json", "--out", str(out), "--name", "cpu-test"
    )
    return p, out


def test_cli_quick_cpu_calibration(quick_cpu):
    """--device cpu --quick measures, fits and writes a loadable profile; JSON keys kept."""
    p, out = quick_cpu
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    ops = {f["op"] for f in doc["fits"]}
    assert {"gemm", "attention", "permute", "expert_ffn"} <= ops
    for f in doc["fits"]:
        assert {"op", "num_gpus", "r2", "heldout_median_ape", "heldout_p90_ape"} <= f.keys()
    assert {"moe (own kernels)", "prefill (own kernels)", "decode (own kernels)"} <= ops
    prof = HardwareProfile.from_dict(json.loads(out.read_text()))
    assert prof.name == "cpu-test" and isinstance(prof.gemm, Roofline)
    assert prof.attention is not None and "cpu" in prof.source
    # the own-kernel fits travel in the profile and price through the cost model
    assert prof.kernels is not None and set(prof.kernels.quality) == {"moe", "prefill", "decode"}
    model = load_model("qwen3-30b-a3b")
    cm = CostModel(load_cluster("h100-sxm-8"), prof)
    assert cm.expert_ffn(model, 4.0, 8) == pytest.approx(
        prof.kernels.moe(
            MoeShape(
                tokens=4.0 * 128 / 8, hidden=2048, inter=768, top_k=8, experts=128, local_experts=8
            )
        )
    )


@pytest.mark.parametrize(
    "args,needle", [(("--device", "tpu"), "device (tpu)"), (("--device", "cuda"), "device (cuda)")]
)
def test_cli_bad_device_one_line(args, needle):
    if args[1] == "cuda" and torch.cuda.is_available():
        pytest.skip("CUDA present")
    p = run("calibrate", *args)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


def test_a_shape_the_gpu_cannot_take_is_skipped_and_named(monkeypatch):
    """One measurement out of memory (or with no fused attention kernel) is skipped and
    reported; any other error still ends the run."""
    import torch

    from moeplan.profiling import calibrate as cal

    real = cal.jobs

    def with_failures(sizes, dev, meas, seed=0):
        todo = real(sizes, dev, meas, seed)

        def oom() -> None:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 128 GiB")

        def no_kernel() -> None:
            raise RuntimeError("No available kernel. Aborting execution.")

        return [todo[0], ("big sdpa", oom), ("wide head sdpa", no_kernel), *todo[1:]]

    monkeypatch.setattr(cal, "jobs", with_failures)
    _, _, meas, _ = cal.run_calibration("cpu", quick=True, models=("qwen3-30b-a3b",))
    assert meas.skipped == [
        ("big sdpa", "out of GPU memory at this shape"),
        ("wide head sdpa", "no fused attention kernel for this shape"),
    ]
    assert meas.gemm  # the rest was measured

    def broken(sizes, dev, meas, seed=0):
        def bug() -> None:
            raise RuntimeError("shape mismatch")

        return [("bug", bug)]

    monkeypatch.setattr(cal, "jobs", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        cal.run_calibration("cpu", quick=True, models=("qwen3-30b-a3b",))
