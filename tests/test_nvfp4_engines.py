"""NVFP4 experts per engine and GPU: on a GPU with FP4 tensor cores (compute capability >= 10.0)
each engine runs its NVFP4 MoE kernel and the tables' ``nvfp4`` rows price it; below that
SGLang and vLLM run their Marlin W4A16 fallback (the same 0.5625 bytes per weight, bf16
compute, priced from the W4A16 Marlin tables), and TensorRT-LLM, which has none, is refused
with one line (exit 2) through the CLI."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cli_run import run_main
from moeplan.backends import backend
from moeplan.kernel_tables import engine_cost_model
from moeplan.specs import gpu_records, load_cluster, load_model
from moeplan.specs.quant import BF16, ModuleQuant

QWEN = Path(__file__).parent / "data" / "configs" / "nvidia--Qwen3.5-122B-A10B-NVFP4"
NVFP4 = 0.5 + 1 / 16


def test_fp4_tensor_cores_from_the_record():
    g = gpu_records()
    assert all(g[n].fp4_tensor_cores for n in ("b200", "gb200", "b300", "gb300"))
    assert not any(g[n].fp4_tensor_cores for n in ("h100-sxm", "h200-sxm", "a100-80g"))
    assert not replace(g["b200"], fp4_ratio=None).fp4_tensor_cores


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_marlin_fallback_below_sm100(engine):
    m = load_model(str(QWEN / "config.json"))
    fmt = m.quant.experts.format
    assert fmt.kernel_dtype == "nvfp4"
    b, g = backend(engine), gpu_records()
    assert b.moe_kernel_blocker("nvfp4", g["h100-sxm"]) is None
    run = b.moe_format(fmt, g["h100-sxm"])
    assert (run.kernel_dtype, run.compute, run.bytes_per_weight) == ("int4_wo", "bf16", NVFP4)
    assert b.moe_format(fmt, g["b200"]) is fmt  # FP4 tensor cores: runs as stored
    nv = b.nvfp4_moe()
    assert nv is not None and nv.fallback == "int4_wo" and "py:" in nv.fallback_source


def test_the_fallback_is_what_the_cost_model_prices():
    """On H100 the NVFP4 experts cost exactly what W4A16 experts of the same bytes cost (the
    Marlin tables), and differ from their bf16 price."""
    m = load_model(str(QWEN / "config.json"))
    cm = engine_cost_model(load_cluster("h100-sxm-8"), None, engine="sglang")
    fmt = replace(m.quant.experts.format, compute="bf16", kernel_dtype="int4_wo")
    w4a16 = replace(
        m, quant=replace(m.quant, experts=ModuleQuant(bytes_per_weight=NVFP4, format=fmt))
    )
    plain = replace(
        m, quant=replace(m.quant, experts=ModuleQuant(bytes_per_weight=2.0, format=BF16))
    )
    for tokens in (4.0, 64.0):
        got = cm.expert_ffn(m, tokens, m.num_experts / 8)
        assert got == cm.expert_ffn(w4a16, tokens, m.num_experts / 8)
        assert got != cm.expert_ffn(plain, tokens, m.num_experts / 8)
    assert cm.runs(m).quant.experts.format.kernel_dtype == "int4_wo"


def test_no_change_on_blackwell():
    m = load_model(str(QWEN / "config.json"))
    cm = engine_cost_model(load_cluster("b200-sxm-8"), None, engine="sglang")
    assert cm.runs(m) is m


def test_trtllm_refuses_nvfp4_on_hopper_through_the_cli(capsys):
    code, out, err = run_main(
        capsys, "bench", "--model", str(QWEN), "--cluster", "h100-sxm-8", "--engine", "trtllm",
        "--attn-tp", "8", "--moe-ep", "8", "--num-prompts", "4", "--json",
    )  # fmt: skip
    line = err.strip()
    assert code == 2 and out == "" and "\n" not in line, err
    assert "NVFP4" in line and "h100-sxm is SM90" in line and "create_moe.py" in line


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_sglang_and_vllm_price_the_fallback_through_the_cli(capsys, engine):
    code, out, err = run_main(
        capsys, "bench", "--model", str(QWEN), "--cluster", "h100-sxm-8", "--engine", engine,
        "--attn-tp", "8", "--moe-ep", "8", "--num-prompts", "4", "--random-input-len", "256",
        "--random-output-len", "16", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert '"completed": 4' in out


# ---- NVFP4 dispatch: DeepEP's message size by the engine's rule ---------------------------
V31 = Path(__file__).parent / "data" / "configs" / "nvidia--DeepSeek-V3.1-NVFP4"
FP8_DISPATCH = 1 + 4 / 128  # e4m3 + one fp32 scale per 128 (DeepEP README)


@pytest.mark.parametrize(
    ("engine", "phase", "gpu", "want"),
    [
        ("sglang", "generation", "b200", NVFP4),  # low_latency_dispatch(use_nvfp4=True)
        ("sglang", "context", "b200", FP8_DISPATCH),  # normal dispatch: fp8
        ("trtllm", "context", "b200", NVFP4),  # post-quant all-to-all, both phases
        ("trtllm", "generation", "b200", NVFP4),
        ("vllm", "generation", "b200", FP8_DISPATCH),  # no NVFP4 dispatch read
        ("sglang", "generation", "h100-sxm", FP8_DISPATCH),  # no FP4: Marlin, bf16 inputs
    ],
)  # fmt: skip
def test_dispatch_bytes_per_element(engine, phase, gpu, want):
    got = backend(engine).dispatch_bytes("nvfp4", phase, gpu_records()[gpu])
    assert got == want
    assert backend(engine).dispatch_bytes("fp8_block", phase, gpu_records()[gpu]) == FP8_DISPATCH


def test_nvfp4_dispatch_moves_the_bytes_of_fewer_fp8_tokens():
    """Inside a node the DeepEP tables measured fp8 dispatches: an NVFP4 decode dispatch of T
    tokens costs what the fp8 dispatch of T * 0.5625 / 1.03125 tokens costs (same bytes);
    the bf16 combine is unchanged, and the prefill (normal kernels, fp8) too."""
    nv = load_model(str(V31 / "config.json"))
    assert nv.quant.experts.format.kernel_dtype == "nvfp4"
    fp8 = replace(
        nv,
        quant=replace(
            nv.quant,
            experts=ModuleQuant(
                bytes_per_weight=1.0, format=replace(BF16, name="fp8", bits=8, kernel_dtype="fp8")
            ),
        ),
    )
    w = engine_cost_model(load_cluster("b200-sxm-8"), None, engine="sglang").wide_ep
    assert w.dispatch_bytes(nv, "generation") == NVFP4
    for t in (16.0, 128.0):
        a = w.moe(nv, t, 8, phase="generation", batch_spread=False)
        b = w.moe(fp8, t * NVFP4 / FP8_DISPATCH, 8, phase="generation", batch_spread=False)
        c = w.moe(fp8, t, 8, phase="generation", batch_spread=False)
        assert a.dispatch == pytest.approx(b.dispatch, rel=1e-12)
        assert a.dispatch < c.dispatch
        assert a.combine == pytest.approx(c.combine, rel=1e-12)
        p = w.moe(nv, t, 8, phase="context", batch_spread=False)
        q = w.moe(fp8, t, 8, phase="context", batch_spread=False)
        assert p.dispatch == pytest.approx(q.dispatch, rel=1e-12)


# ---- launch flags: the priced MoE runner pinned in SGLang's export ------------------------
def _target(gpu: str, sm: int, moe_dtype: str):
    from moeplan.export.constraints import Target

    return Target(
        architecture="DeepseekV3ForCausalLM", num_experts=256, gpu=gpu, gpu_sm=sm,
        gpu_nccl=True, gpu_deepep=True, intra="nvswitch", inter="ib", num_nodes=1,
        gpus_per_node=8, moe_dtype=moe_dtype,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("gpu", "sm", "dtype", "runner"),
    [
        ("b200", 100, "nvfp4", "flashinfer_trtllm"),
        ("h100-sxm", 90, "nvfp4", "marlin"),
        ("b200", 100, "fp8_block", None),
    ],
)
def test_sglang_launch_pins_the_priced_runner_and_reads_back(gpu, sm, dtype, runner):
    from moeplan.backends.launch_grammars import grammars
    from moeplan.backends.launch_reader import read_launch
    from moeplan.export.sglang import sglang_args
    from moeplan.planners.layout import Layout

    lay = Layout(attn_tp=8, attn_dp=1, moe_tp=1, moe_ep=8, pp=1)
    r = sglang_args(lay, model_path="m", target=_target(gpu, sm, dtype), num_nodes=1)
    args = list(r.args)
    if runner is None:
        assert "--moe-runner-backend" not in args
    else:
        assert args[args.index("--moe-runner-backend") + 1] == runner
    s = read_launch(" ".join(args), grammars())
    assert s.moe_runner == runner


def test_an_unpriced_runner_in_a_launch_is_one_line():
    from moeplan.backends.launch_grammars import grammars
    from moeplan.backends.launch_reader import read_launch
    from moeplan.errors import MoeplanError

    cmd = "python -m sglang.launch_server --model-path m --tp-size 8 --moe-runner-backend cutlass"
    with pytest.raises(MoeplanError) as err:
        read_launch(cmd, grammars())
    assert "--moe-runner-backend ('cutlass') must be one of" in str(err.value)


@pytest.mark.parametrize(
    ("version", "sm", "dtype", "env"),
    [
        ("0.11.0", 100, "nvfp4", [("VLLM_USE_FLASHINFER_MOE_FP4", "1"),
                                  ("VLLM_FLASHINFER_MOE_BACKEND", "latency")]),
        ("0.24.0", 100, "nvfp4", []),  # flashinfer_trtllm is its default
        ("0.11.0", 90, "nvfp4", []),  # Marlin by default
        ("0.11.0", 100, "fp8_block", []),
    ],
)  # fmt: skip
def test_vllm_launch_environment_selects_the_priced_nvfp4_runner(version, sm, dtype, env):
    assert backend("vllm").moe_runner_env(dtype, sm, version) == env


def test_the_sglang_runner_flag_is_a_flag_of_the_pinned_release():
    from moeplan.export.constraints import SGLANG_PINNED, flags
    from moeplan.export.sglang import sglang_args
    from moeplan.planners.layout import Layout

    lay = Layout(attn_tp=8, attn_dp=1, moe_tp=1, moe_ep=8, pp=1)
    r = sglang_args(lay, model_path="m", target=_target("b200", 100, "nvfp4"), num_nodes=1)
    assert "--moe-runner-backend" in flags(r.args)
    assert set(flags(r.args)) <= SGLANG_PINNED.known_flags


def test_sglang_nvfp4_pd_decode_server_runs_deepep_low_latency():
    """A P/D decode server of NVFP4 experts on DeepEP: ``--moe-runner-backend
    flashinfer_cutedsl --deepep-mode low_latency`` (SGLang's NVFP4 path under DeepEP's
    low-latency dispatch, moe_runner/flashinfer_cutedsl.py:624-626, 0.5.23), one runner flag,
    every flag the pinned release's, no rule broken; the prefill server of the same layout
    keeps the fused MoE and its priced runner; the launch reads back."""
    from moeplan.backends.launch_grammars import grammars
    from moeplan.backends.launch_reader import read_launch
    from moeplan.export.constraints import SGLANG_PINNED, check_sglang, flags
    from moeplan.export.sglang import sglang_args
    from moeplan.planners.layout import Layout

    lay = Layout(attn_dp=8, moe_ep=8)
    t = _target("b200", 100, "nvfp4")
    dec = list(sglang_args(lay, model_path="m", target=t, num_nodes=1, role="decode").args)
    f = flags(dec)
    assert f["--moe-a2a-backend"] == "deepep"
    assert f["--moe-runner-backend"] == "flashinfer_cutedsl"
    assert f["--deepep-mode"] == "low_latency"
    assert dec.count("--moe-runner-backend") == 1
    assert set(f) <= SGLANG_PINNED.known_flags
    assert check_sglang(dec, t, gpus_used=8) == []
    i = dec.index("--attn-dp-size")  # the reader spells attention DP --dp-size
    back = read_launch(" ".join(dec[:i] + dec[i + 2 :]), grammars())
    assert (back.moe_runner, back.a2a) == ("flashinfer_cutedsl", "deepep")
    pre = flags(sglang_args(lay, model_path="m", target=t, num_nodes=1, role="prefill").args)
    assert pre.get("--moe-a2a-backend", "none") == "none" and "--deepep-mode" not in pre
    assert pre["--moe-runner-backend"] == "flashinfer_trtllm"
    # the same DeepEP flags without the low-latency mode break the rule, one line
    bad = check_sglang([a for a in dec if a not in ("--deepep-mode", "low_latency")], t,
                       gpus_used=8)  # fmt: skip
    assert any("server that prefills" in b for b in bad)
