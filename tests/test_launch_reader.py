"""The engines' launch commands read into moeplan's instance (moeplan.backends.launch_reader).

Oracles: the 126 measured lab runs give each command's layout in their own columns (tp, ep,
pp, GPUs); the engines' parallel arithmetic (vLLM FusedMoEParallelConfig.make, SGLang
server_args) in closed form; refusals name the flag."""

from __future__ import annotations

import csv
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.backends.launch_grammars import grammars
from moeplan.backends.launch_reader import gpus_of, read_launch, serve_flags
from moeplan.errors import MoeplanError

G = grammars()


def _rows() -> list[dict[str, str]]:
    path = resources.files("moeplan").joinpath("data", "benchmarks", "lab_a100_h100_moe.csv")
    with path.open() as f:
        return list(csv.DictReader(f))


def test_every_lab_command_reads_into_its_measured_layout():
    rows = _rows()
    assert len(rows) == 126
    for r in rows:
        s = read_launch(r["serve_flags"], G)
        d = G[s.engine].degrees(s)
        assert s.engine == r["engine"], r["case_id"]
        assert gpus_of(s, G) == int(r["gpus"]), r["case_id"]
        assert (s.tp or 1) == int(r["tp"]) and d.pp == int(r["pp"]), r["case_id"]
        assert d.moe_ep == int(r["ep"]), r["case_id"]
        assert d.attn_tp * d.attn_dp == d.moe_tp * d.moe_ep, r["case_id"]
        for key, value in (kv.split("=") for kv in r["other_opts"].split(";") if "=" in kv):
            if key == "max-num-batched-tokens":
                assert s.step_tokens == int(value), r["case_id"]
            if key == "gpu-mem-util":
                assert s.mem_fraction == pytest.approx(float(value)), r["case_id"]


def test_lab_flags_that_change_speed_unmodelled_are_listed_not_dropped():
    rows = {r["other_opts"]: r for r in _rows()}
    s = read_launch(rows["attention-backend=triton"]["serve_flags"], G)
    assert [f for f, _ in s.not_priced] == ["--attention-backend triton"]
    s = read_launch(rows["async-scheduling"]["serve_flags"], G)
    assert s.not_priced == () and s.overlap_on  # priced: moeplan.cost.host
    assert serve_flags(s, G)["overlap_schedule"] is True
    s = read_launch(rows["tool-call-parser=glm"]["serve_flags"], G)
    assert {f for f, _ in s.no_effect} == {"--tool-call-parser", "--reasoning-parser"}
    assert s.not_priced == ()


def test_vllm_expert_parallel_flattens_tp_across_dp():
    s = read_launch("vllm serve m -tp 2 -dp 4 --enable-expert-parallel", G)
    f = serve_flags(s, G)
    assert (f["attn_tp"], f["attn_dp"], f["moe_tp"], f["moe_ep"]) == (2, 4, 1, 8)
    s = read_launch("vllm serve m -tp 2 -dp 4", G)
    f = serve_flags(s, G)
    assert (f["attn_tp"], f["attn_dp"], f["moe_tp"], f["moe_ep"]) == (2, 4, 8, 1)


def test_vllm_budgets_are_per_dp_rank():
    s = read_launch("vllm serve m -dp 4 --max-num-batched-tokens 2048 --max-num-seqs 64", G)
    f = serve_flags(s, G)
    assert f["chunk_tokens"] == 8192 and f["max_running"] == 256


def test_sglang_dp_attention_and_replicas():
    s = read_launch(
        "python3 -m sglang.launch_server --model-path m --tp 8 --dp 8 --enable-dp-attention "
        "--ep 8 --moe-a2a-backend deepep --enable-two-batch-overlap "
        "--chunked-prefill-size 16384 --mem-fraction-static 0.8",
        G,
    )
    f = serve_flags(s, G)
    assert (f["attn_tp"], f["attn_dp"], f["moe_tp"], f["moe_ep"]) == (1, 8, 1, 8)
    assert f["a2a"] == "deepep" and f["tbo"] is True and f["chunk_tokens"] == 16384
    assert f["mem_fraction"] == pytest.approx(0.8)
    s = read_launch("python -m sglang.launch_server --model-path m --tp 4 --dp 2", G)
    assert serve_flags(s, G)["replicas"] == 2 and gpus_of(s, G) == 8


def test_speculative_flags_read_as_mtp_draft_tokens():
    s = read_launch(
        "python3 -m sglang.launch_server --model-path m --speculative-algorithm EAGLE "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
        G,
    )
    assert s.mtp == 3 and serve_flags(s, G)["mtp"] == 3
    s = read_launch(
        """vllm serve m --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 2}'""",
        G,
    )
    assert s.mtp == 2


@pytest.mark.parametrize(
    ("command", "names"),
    [
        ("vllm serve m --no-such-flag 3", "--no-such-flag"),
        ("vllm serve m -tp 0", "-tp"),
        ("vllm serve m -tp two", "-tp"),
        ("vllm serve m -tp 2 -tp 4", "-tp"),
        ("vllm serve m --gpu-memory-utilization 1.5", "--gpu-memory-utilization"),
        ("vllm serve m --max-num-seqs", "--max-num-seqs"),
        ("vllm serve m --kv-cache-dtype fp4", "--kv-cache-dtype"),
        ("vllm serve m --dtype float32", "--dtype"),
        ('vllm serve m --speculative-config \'{"method": "ngram"}\'', "method"),
        ("python3 -m sglang.launch_server --tp 4 --ep 3", "--ep-size"),
        ("python3 -m sglang.launch_server --tp 4 --dp 3 --enable-dp-attention", "--dp-size"),
        (
            "python3 -m sglang.launch_server --speculative-algorithm EAGLE "
            "--speculative-num-steps 3 --speculative-eagle-topk 4",
            "--speculative-eagle-topk",
        ),
        ("trtllm-serve m --extra_llm_api_options cfg.yaml", "--extra_llm_api_options"),
        ("trtllm-serve m --backend trt", "--backend"),
        ("docker run img", "must start with"),
        ("vllm serve 'unclosed", "shell line"),
        ("", "empty"),
    ],
)
def test_bad_commands_are_one_line_naming_the_flag(command, names):
    with pytest.raises(MoeplanError) as err:
        read_launch(command, G)
    assert names in str(err.value) and "\n" not in str(err.value)


def test_every_flag_says_why_and_is_listed_once():
    for g in G.values():
        table = g.by_name()  # raises on a name listed twice
        assert table
        for f in g.flags:
            assert f.why.strip(), f.names
            assert all(n.startswith("-") for n in f.names), f.names


@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    dp=st.sampled_from([1, 2, 4, 8]),
    ep=st.booleans(),
    pp=st.sampled_from([1, 2]),
)
@settings(max_examples=examples(40))
def test_vllm_degrees_keep_one_stage_width(tp, dp, ep, pp):
    cmd = f"vllm serve m -tp {tp} -dp {dp} -pp {pp}" + (" --enable-expert-parallel" if ep else "")
    s = read_launch(cmd, G)
    d = G["vllm"].degrees(s)
    assert d.attn_tp * d.attn_dp == d.moe_tp * d.moe_ep == tp * dp
    assert gpus_of(s, G) == tp * dp * pp
