"""The engine's host work per step (moeplan.cost.host): the closed form of the step in series
and overlapped, per attention-DP rank, the engines' defaults, the launch flags that set it,
and the one-line refusals."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.backends import backend
from moeplan.backends.launch_grammars import grammars
from moeplan.backends.launch_reader import read_launch, serve_flags
from moeplan.cost.host import HOST_S_PER_SEQ, host_seconds, step_seconds
from moeplan.errors import MoeplanError
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.layout import Layout
from moeplan.serve import Batch, IterationModel
from moeplan.serve.iteration.instance_knobs import InstanceKnobs, resolve_knobs
from moeplan.specs import load_cluster, load_model

MODEL = load_model("qwen3-30b-a3b")
CLUSTER = load_cluster("h100-sxm-8")
G = grammars()


ENGINE = engine_cost_model(CLUSTER, None, engine="vllm")


def _models(attn_dp: int = 1) -> tuple[IterationModel, IterationModel]:
    """One layout on vLLM's tables, in series (vLLM 0.11.0's default) and overlapped."""
    lay = Layout(attn_tp=2 // attn_dp, attn_dp=attn_dp, moe_tp=1, moe_ep=2)
    serial = IterationModel(MODEL, CLUSTER, ENGINE, lay)
    over = IterationModel(MODEL, CLUSTER, ENGINE, lay, knobs=InstanceKnobs(overlap=True))
    return serial, over


@settings(deadline=None, max_examples=examples(25))
@given(decode=st.integers(1, 600), ctx=st.integers(16, 8000), dp=st.sampled_from([1, 2]))
def test_step_is_gpu_plus_host_in_series_and_the_longer_overlapped(decode, ctx, dp):
    """Closed form: host = price x the busiest DP rank's sequences (ceil); vLLM 0.11.0 (no
    --async-scheduling) adds it, an overlapped engine waits only for the longer."""
    serial, over = _models(dp)
    b = Batch(decode, ctx, ())
    gpu = serial._plain_breakdown(b)["period_s"]  # the GPU's step: the kernel prices alone
    host = HOST_S_PER_SEQ * -(-decode // dp)
    assert serial(b) == pytest.approx(gpu + host, rel=1e-9)
    assert over(b) == pytest.approx(max(gpu, host), rel=1e-9)
    bd = serial.breakdown(b)
    assert bd["host_s"] == pytest.approx(host, rel=1e-12)
    assert bd["host_exposed_s"] == pytest.approx(host, rel=1e-9)


def test_published_price_and_step_forms():
    """5.5 ms at 256 sequences (vLLM issue #10634's 5-6 ms gap); none for an empty step."""
    assert host_seconds(256) == pytest.approx(5.5e-3, rel=1e-12)
    assert host_seconds(0) == 0.0
    assert step_seconds(3.0, 1.0, overlap=False) == 4.0
    assert step_seconds(3.0, 1.0, overlap=True) == 3.0
    assert step_seconds(1.0, 3.0, overlap=True) == 3.0


def test_engine_defaults_by_release():
    """SGLang and TensorRT-LLM overlap in every release; vLLM from 0.14.0, not in 0.11.0."""
    assert backend("sglang").host_overlap("0.5.4.post2")
    assert backend("trtllm").host_overlap(None)
    vllm = backend("vllm")
    assert not vllm.host_overlap(None) and not vllm.host_overlap("0.11.0")
    assert vllm.host_overlap("0.14.0") and vllm.host_overlap("0.24.0")
    assert vllm.overlap_args(True, "0.11.0") == ["--async-scheduling"]
    assert vllm.overlap_args(False, "0.24.0") == ["--no-async-scheduling"]
    assert vllm.overlap_args(True, "0.24.0") == [] and vllm.overlap_args(None) == []
    assert backend("sglang").overlap_args(False) == ["--disable-overlap-schedule"]


def test_launch_flags_set_the_overlap():
    on = read_launch("vllm serve openai/gpt-oss-20b --async-scheduling", G)
    assert serve_flags(on, G)["overlap_schedule"] is True
    off = read_launch(
        "python3 -m sglang.launch_server --model-path m --disable-overlap-schedule", G
    )
    assert serve_flags(off, G)["overlap_schedule"] is False
    plain = read_launch("vllm serve openai/gpt-oss-20b", G)
    assert "overlap_schedule" not in serve_flags(plain, G)
    both = read_launch("vllm serve m --async-scheduling --no-async-scheduling", G)
    with pytest.raises(MoeplanError, match="both on and off"):
        serve_flags(both, G)


def test_an_engine_without_the_flag_is_refused_in_one_line():
    lay = Layout(attn_tp=1, attn_dp=1, moe_tp=1, moe_ep=1)
    with pytest.raises(MoeplanError, match="TensorRT-LLM has no flag"):
        resolve_knobs("trtllm", MODEL, CLUSTER, lay, overlap=False)
    with pytest.raises(MoeplanError, match="needs an engine"):
        resolve_knobs(None, MODEL, CLUSTER, lay, overlap=True)
    assert resolve_knobs("vllm", MODEL, CLUSTER, lay, overlap=True).overlap is True


def test_bench_states_the_host_price_and_async_scheduling_shortens_the_run():
    """The same burst with and without --async-scheduling: the overlapped run is shorter, and
    both answers state the host price, its source and whether it overlapped."""
    import json

    def run(launch: str) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "moeplan", "bench", "--launch", launch, "--cluster",
             "h100-sxm-8", "--num-prompts", "200", "--random-input-len", "256",
             "--random-output-len", "64", "--json"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return json.loads(out.stdout)

    plain = run("vllm serve Qwen/Qwen3-30B-A3B -tp 2")
    fast = run("vllm serve Qwen/Qwen3-30B-A3B -tp 2 --async-scheduling")
    hp, hf = plain["moeplan"]["scheduler"]["host"], fast["moeplan"]["scheduler"]["host"]
    assert (hp["overlapped"], hf["overlapped"]) == (False, True)
    assert hp["seconds_per_sequence"] == pytest.approx(HOST_S_PER_SEQ)
    assert "10634" in hp["source"] and 0.0 < hp["decode_host_share"] < 1.0
    assert fast["duration"] < plain["duration"]
    assert fast["mean_itl_ms"] < plain["mean_itl_ms"]


def test_search_turns_the_overlap_on_where_the_release_runs_it():
    """vLLM 0.11.0 leaves --async-scheduling off: a search turns it on for one-node,
    single-stage instances without speculation, and never where vLLM refuses it (PP > 1,
    MTP, a TP group across nodes on Ray); SGLang overlaps already (the knob stays unset)."""
    from moeplan.serve.knobs import knob_variants

    def overlap(engine: str, lay: Layout, cluster=CLUSTER, **kw: object) -> set:
        kn = InstanceKnobs(**kw)  # type: ignore[arg-type]
        return {k.overlap for _, k in knob_variants(engine, MODEL, cluster, lay, kn)}

    one = Layout(attn_tp=2, attn_dp=1, moe_tp=2, moe_ep=1)
    assert overlap("vllm", one) == {True}
    assert overlap("sglang", one) == {None}
    assert overlap("vllm", Layout(attn_tp=2, attn_dp=1, moe_tp=2, moe_ep=1, pp=2)) == {None}
    assert overlap("vllm", one, overlap=False) == {False}  # the user's setting holds
    two_nodes = load_cluster("h100-sxm-8", 2)
    wide = Layout(attn_tp=16, attn_dp=1, moe_tp=16, moe_ep=1)
    assert overlap("vllm", wide, two_nodes) == {None}  # Ray: refused
    dp = Layout(attn_tp=8, attn_dp=2, moe_tp=16, moe_ep=1)
    assert overlap("vllm", dp, two_nodes) == {True}  # one DP rank per node: no Ray


def test_exported_vllm_launch_carries_async_scheduling_and_its_rules():
    """The launch flag of the overlap, and the export check's rule (PP, speculation, Ray)."""
    from moeplan.export.constraints import Target, check_vllm

    t = Target.of(MODEL, CLUSTER)
    base = ["--tensor-parallel-size", "2", "--async-scheduling"]
    assert not check_vllm(base, t, gpus_used=2)
    for extra in (["--pipeline-parallel-size", "2"], ["--speculative-config", "{}"]):
        bad = check_vllm([*base, *extra], t, gpus_used=4 if "2" in extra else 2)
        assert any("--async-scheduling needs" in b for b in bad), extra
    vllm = backend("vllm")
    kn = InstanceKnobs(overlap=True)
    assert "--async-scheduling" in vllm.knob_args(kn)
    assert "--async-scheduling" not in vllm.knob_args(InstanceKnobs())
    assert "--disable-overlap-schedule" in backend("sglang").knob_args(InstanceKnobs(overlap=False))


def test_host_line_states_the_price_and_how_it_runs():
    from moeplan.search.job.outcome import host_line

    rec = {"overlapped": False, "seconds_per_sequence": HOST_S_PER_SEQ,
           "decode_host_share": 0.25, "source": "x"}  # fmt: skip
    line = host_line(rec)
    assert line is not None and "21.5 us" in line and "in series" in line and "25%" in line
    assert "overlapped" in str(host_line({**rec, "overlapped": True}))
    assert host_line(None) is None


def test_vllm_011_refuses_async_scheduling_with_a_pipeline_or_speculation():
    """vLLM 0.11's create_engine_config rule, one line; the lab's 0.10.2 ran it with -pp 2."""
    pp2 = Layout(attn_tp=1, attn_dp=1, moe_tp=1, moe_ep=1, pp=2)
    with pytest.raises(MoeplanError, match="refuses --async-scheduling with pipeline"):
        resolve_knobs("vllm", MODEL, CLUSTER, pp2, overlap=True)
    assert resolve_knobs("vllm", MODEL, CLUSTER, pp2, overlap=True, version="0.10.2").overlap
    assert backend("vllm").overlap_blocker(1, 1, "0.11.0") is not None
    assert backend("vllm").overlap_blocker(1, 0, "0.11.0") is None
    assert backend("sglang").overlap_blocker(2, 1) is None
