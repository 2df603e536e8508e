"""Weight offload to host memory (cost/offload.py): the offloaded layers as the engines' flags
mean them, the memory of a small model with k of n layers offloaded against a hand count, the
copy-stream schedule against its closed forms, the phase step's price, the launch flags and
the bad inputs (one line, exit 2)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cli_run import run_main
from moeplan.backends import backend
from moeplan.cost import memory as mem
from moeplan.cost.offload import WeightOffload, offload_memory, offloaded_span
from moeplan.errors import MoeplanError
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.layout import Layout
from moeplan.serve.iteration.instance_knobs import resolve_knobs
from moeplan.serve.iteration.phase import PhaseModel
from moeplan.specs import load_cluster, load_model

LITE = load_model("deepseek-v2-lite")  # 27 layers, layer 0 dense, 64 experts of 2048 x 1408


def test_offloaded_layers_are_the_last_of_each_group():
    """vLLM's docstring example: group 8, 2 per group offloads layers 6, 7, 14, 15, 22, 23."""
    assert WeightOffload(8, 2).layers(24) == (6, 7, 14, 15, 22, 23)
    assert WeightOffload(2, 1).layers(7) == (1, 3, 5)
    assert WeightOffload(1, 1).layers(3) == (0, 1, 2)


def test_memory_of_k_of_n_layers_offloaded_by_hand():
    """deepseek-v2-lite, one GPU holding all 64 experts, ``3:1:1``: layers 2, 5, ..., 26 (9 of
    27, all MoE) keep their routed experts on the host, 64 x 3 x 2048 x 1408 bf16 weights
    = 1,107,296,256 bytes each; the GPU holds two of them (the layer computing and the one
    prefetched) as buffers."""
    per_layer = 64 * 3 * 2048 * 1408 * 2
    assert per_layer == 1_107_296_256
    off = WeightOffload(3, 1, 1)
    shape = mem.InstanceShape(
        attn_tp=1, attn_dp=1, moe_tp=1, moe_ep=1, pp=1, dense_tp=1, local_experts=64, k=6
    )
    layers = range(LITE.num_layers)
    om = offload_memory(LITE, off, layers, 64)
    assert om.layers == (2, 5, 8, 11, 14, 17, 20, 23, 26)
    assert om.offloaded == 9 * per_layer
    assert om.buffers == 2 * per_layer
    full = mem.stage_weights(LITE, shape, layers, True, True)
    held = mem.stage_weights(LITE, replace(shape, offload=off), layers, True, True)
    assert full - held == 7 * per_layer
    # prefetching 3 ahead holds 4 layers; a dense layer in the set moves nothing
    assert offload_memory(LITE, WeightOffload(3, 1, 3), layers, 64).buffers == 4 * per_layer
    assert offload_memory(LITE, WeightOffload(1, 1), range(1), 64).offloaded == 0.0


def test_step_is_the_compute_when_every_copy_is_covered():
    """Ten layers of 10 ms, every other one offloaded with a 5 ms copy: each copy runs under
    the layer between, the pass is the compute (100 ms)."""
    compute = [10.0] * 10 + [0.0]
    assert offloaded_span(compute, [5.0] * 5, [1, 3, 5, 7, 9], 1) == pytest.approx(100.0)


def test_step_when_the_transfer_dominates_closed_forms():
    """Prefetch 1: a copy starts when the previous offloaded layer has computed, so the pass is
    sum over offloaded layers of max(compute between, copy) + the layer's own compute: four
    1 ms layers, layers 1 and 3 offloaded with 10 ms copies: 2 x (max(1, 10) + 1) = 22 ms.
    Prefetch 2 with every layer offloaded: the copies run back to back, 4 x 10 = 40 ms."""
    assert offloaded_span([1.0] * 4 + [0.0], [10.0, 10.0], [1, 3], 1) == pytest.approx(22.0)
    assert offloaded_span([1.0] * 4 + [0.0], [10.0] * 4, [0, 1, 2, 3], 2) == pytest.approx(40.0)
    # a window between the two cases: copy 6 ms under 4 ms of compute between, 1 ms layer
    assert offloaded_span([4.0, 1.0, 0.0], [6.0], [1], 1) == pytest.approx(6.0 + 1.0)


def _lite_phase(offload: WeightOffload | None) -> PhaseModel:
    c = load_cluster("h100-sxm-8")
    lay = Layout(attn_dp=1, moe_ep=1)
    kn = resolve_knobs("sglang", LITE, c, lay, a2a="nccl", offload=offload)
    return PhaseModel(LITE, c, engine_cost_model(c, engine="sglang"), lay, kn)


def test_phase_step_pays_the_uncovered_copies():
    """deepseek-v2-lite on one H100 (PCIe Gen5, 64 GB/s per direction) at one decode sequence:
    a layer computes in well under a copy's 17 ms, so with prefetch 1 every offloaded layer
    adds its copy less the layer between; the memory drops by the offloaded experts less the
    buffers, and the breakdown still sums to the step."""
    base = _lite_phase(None).step("decode", 1, 512)
    pm = _lite_phase(WeightOffload(3, 1, 1))
    r = pm.step("decode", 1, 512)
    secs, layers = pm.offload_transfers(pm.knobs.offload)
    assert secs[0] == pytest.approx(1_107_296_256 / 64e9)
    assert sum(r.breakdown.values()) == pytest.approx(r.step_s, rel=1e-12)
    assert r.breakdown["offload"] > 0.9 * sum(secs) - base.step_s
    assert r.step_s == pytest.approx(base.step_s + r.breakdown["offload"], rel=1e-9)
    per_layer = 1_107_296_256
    assert base.memory_bytes["weights"] - r.memory_bytes["weights"] == pytest.approx(7 * per_layer)


def test_fit_offload_only_when_the_weights_do_not_fit():
    """The auto choice: none where the phase fits; none where only the KV does not fit (the
    batch's to shrink)."""
    pm = _lite_phase(None)
    assert pm.fit_offload("decode", 8, 512) is None
    with pytest.raises(MoeplanError, match="GiB per GPU"):
        pm.step("decode", 100_000, 4096)
    assert pm.fit_offload("decode", 100_000, 4096) is None


def test_launch_flags_carry_the_engines_names():
    off = WeightOffload(2, 1, 1)
    assert backend("sglang").offload_args(off) == [
        "--offload-group-size", "2", "--offload-num-in-group", "1",
        "--offload-prefetch-step", "1", "--offload-mode", "cpu",
    ]  # fmt: skip
    assert backend("vllm").offload_args(off) == [
        "--offload-group-size", "2", "--offload-num-in-group", "1", "--offload-prefetch-step", "1",
    ]  # fmt: skip
    kn = _lite_phase(off).knobs
    assert "--offload-group-size" in backend("sglang").knob_args(kn)
    assert backend("trtllm").offload_blocker() is not None
    assert backend("sglang").offload_args(None) == []


NVFP4_CKPT = "tests/data/configs/nvidia--DeepSeek-V3.1-NVFP4"
PREFILL2 = (
    "serve-sim", "--model", NVFP4_CKPT, "--attn-dp", "2", "--moe-ep", "2", "--kv-dtype", "fp8",
    "--phase", "prefill", "--tokens-per-gpu", "16384", "--isl", "2000",
)  # fmt: skip


def test_auto_offload_chosen_and_said(capsys):
    """The NVFP4 checkpoint on 2 GB200s needs 198.7 GiB per GPU: ``auto`` offloads the
    fewest layers that fit and says why and at what price; ``off`` keeps the refusal."""
    code, out, err = run_main(capsys, *PREFILL2, "--cluster", "gb200-nvl72", "--json")
    assert code == 0, out + err
    wo = json.loads(out)["weight_offload"]
    assert wo["chosen"] == "auto" and wo["need_without_gib_per_gpu"] > 185.0
    assert "GiB per GPU" in wo["why"] and "ms of copies per forward pass" in wo["price"]
    code, out, err = run_main(
        capsys, *PREFILL2, "--cluster", "gb200-nvl72", "--weight-offload", "off", "--json"
    )
    assert code == 2 and "198.7 GiB per GPU" in out + err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--cluster", "b300-sxm-8", "--weight-offload", "2:1:1"), "no host-link bandwidth"),
        (("--cluster", "gb200-nvl72", "--weight-offload", "100:1"), "more than"),
        (("--cluster", "gb200-nvl72", "--weight-offload", "2:3"), "must be in 1..2"),
        (("--cluster", "gb200-nvl72", "--weight-offload", "two"), "GROUP:NUM[:PREFETCH]"),
    ],
)
def test_bad_offload_is_one_line(capsys, args, says):
    code, out, err = run_main(capsys, *PREFILL2, *args, "--json")
    text = (out + err).strip()
    assert code == 2 and "\n" not in text and says in text, text


def test_offload_outside_phase_is_refused(capsys):
    code, out, err = run_main(
        capsys, "serve-sim", "--model", "deepseek-v2-lite", "--cluster", "h100-sxm-8",
        "--rate", "1", "--weight-offload", "3:1:1", "--json",
    )  # fmt: skip
    text = (out + err).strip()
    assert code == 2 and "\n" not in text and "applies to --phase" in text, text
