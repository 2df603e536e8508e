"""``moeplan bench``: a finite benchmark run as ``vllm bench serve`` sends and measures it.

Oracles: closed forms of the engine with a constant iteration time (one request alone, N
identical requests in one burst, a concurrency cap of one, a cap that holds a due request),
vLLM's own definitions (``vllm/benchmarks/serve.py``: TPOT excludes the first token; the
``--save-result`` key names), vLLM's random-dataset bounds, and a ``--compare`` round trip.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cli_run import run_main
from moeplan.commands.bench import (
    VLLM_KEYS,
    merge,
    peak_concurrency,
    requests_of,
    shares,
    vllm_metrics,
)
from moeplan.commands.bench_workload import (
    Prompts,
    random_lengths,
    send_times,
    sharegpt_lengths,
)
from moeplan.errors import MoeplanError
from moeplan.serve.cuda_graphs import OUTSIDE_GRAPHS_FLAG, outside_graphs
from moeplan.serve.engine.config import EngineConfig
from moeplan.serve.engine.run import simulate

D = 0.01  # the fake engine's iteration time (s)
CFG = EngineConfig(policy="prefill-first", chunk_tokens=8192, max_running=1024, kv_tokens=10**6)


def _run(isl, osl, due=None, cap=None):
    p = Prompts(np.asarray(isl, np.int64), np.asarray(osl, np.int64), "test")
    due = np.zeros(len(p.isl)) if due is None else np.asarray(due, float)
    res = simulate(requests_of(p, due, cap), CFG, lambda _batch: D)
    return vllm_metrics(merge([(np.arange(len(p.isl)), res)], len(p.isl)))


def test_one_request_alone_takes_ttft_plus_out_minus_one_tpot():
    m = _run([100], [10])
    # one prefill iteration gives the first token, nine decode steps the rest
    assert m["mean_ttft_ms"] == pytest.approx(D * 1e3)
    assert m["mean_tpot_ms"] == pytest.approx(D * 1e3)
    assert m["duration"] == pytest.approx(m["mean_ttft_ms"] / 1e3 + 9 * m["mean_tpot_ms"] / 1e3)
    assert m["mean_e2el_ms"] == pytest.approx(10 * D * 1e3)
    assert m["max_concurrent_requests"] == 1


def test_a_burst_of_identical_requests_admitted_at_once():
    n, osl = 8, 5
    m = _run([100] * n, [osl] * n)  # 800 prompt tokens fit one 8192-token prefill
    assert m["duration"] == pytest.approx(osl * D)
    assert m["median_ttft_ms"] == pytest.approx(D * 1e3)
    assert m["p99_ttft_ms"] == pytest.approx(D * 1e3)
    assert m["total_token_throughput"] == pytest.approx(n * (100 + osl) / (osl * D))
    assert m["max_concurrent_requests"] == n
    assert m["completed"] == n and m["total_output_tokens"] == n * osl


def test_a_concurrency_cap_of_one_serves_the_burst_in_series():
    n, osl = 4, 6
    m = _run([50] * n, [osl] * n, cap=1)
    assert m["duration"] == pytest.approx(n * osl * D)
    assert m["max_concurrent_requests"] == 1
    # TTFT counts from the send: a held request's wait in the client is not in it
    assert m["mean_ttft_ms"] == pytest.approx(D * 1e3)


def test_a_capped_request_is_sent_at_its_due_time_not_before():
    # one slot; the second prompt is due long after the first finishes
    m = _run([50, 50], [3, 3], due=[0.0, 1.0], cap=1)
    assert m["duration"] == pytest.approx(1.0 + 3 * D)
    assert m["mean_e2el_ms"] == pytest.approx(3 * D * 1e3)


def test_tpot_excludes_the_first_token_and_one_token_requests():
    # a one-token request has no TPOT; the other: (e2e - ttft) / (out - 1)
    m = _run([100, 100], [1, 4])
    assert m["mean_tpot_ms"] == pytest.approx(D * 1e3)
    assert m["mean_itl_ms"] == pytest.approx(D * 1e3)


def test_peak_concurrency_frees_a_slot_before_the_next_send():
    assert peak_concurrency(np.array([0.0, 1.0]), np.array([1.0, 2.0])) == 1
    assert peak_concurrency(np.array([0.0, 0.5]), np.array([1.0, 2.0])) == 2


def test_replicas_share_prompts_and_the_cap_round_robin():
    parts = shares(5, 2, 3)
    assert [list(i) for i, _ in parts] == [[0, 2, 4], [1, 3]]
    assert [k for _, k in parts] == [2, 1]


def test_random_lengths_follow_vllm_bounds():
    p = random_lengths(2000, 1000, 100, 0.25, seed=3)
    assert p.isl.min() >= 750 and p.isl.max() <= 1250
    assert p.osl.min() >= 75 and p.osl.max() <= 125
    assert p.isl.max() > 1200 and p.isl.min() < 800  # the whole range is drawn
    fixed = random_lengths(10, 1000, 100, 0.0, seed=0)
    assert set(fixed.isl) == {1000} and set(fixed.osl) == {100}
    with pytest.raises(MoeplanError, match="range-ratio"):
        random_lengths(10, 1000, 100, 1.0, seed=0)


def test_send_times_burst_and_rate():
    assert not send_times(5, math.inf, 1.0, 0).any()
    t = send_times(1000, 10.0, 1.0, 0)
    assert np.all(np.diff(t) >= 0)
    assert t[-1] == pytest.approx(100.0)  # vLLM rescales the last send to n / rate
    steady = send_times(4, 2.0, math.inf, 0)
    assert np.allclose(steady, [0.5, 1.0, 1.5, 2.0])


BENCH = ("bench", "--model", "deepseek-v2-lite", "--cluster", "h100-sxm-8", "--num-prompts",
         "30", "--random-input-len", "256", "--random-output-len", "16")  # fmt: skip


def test_bench_json_has_vllm_save_result_keys(capsys):
    code, out, err = run_main(capsys, *BENCH, "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert set(VLLM_KEYS) <= set(ans)
    assert ans["completed"] == 30 and ans["total_input_tokens"] == 30 * 256
    assert ans["total_token_throughput"] == pytest.approx(30 * (256 + 16) / ans["duration"])
    assert ans["moeplan"]["kind"].startswith("simulated finite run")


def test_bench_prints_the_benchmark_block(capsys):
    code, out, err = run_main(capsys, *BENCH)
    assert code == 0, err
    for line in ("Benchmark duration (s):", "Total token throughput (tok/s):",
                 "Mean TTFT (ms):", "P99 ITL (ms):", "Peak concurrent requests:"):  # fmt: skip
        assert line in out


def test_compare_round_trip(capsys, tmp_path):
    code, out, _ = run_main(capsys, *BENCH, "--max-concurrency", "8", "--json")
    assert code == 0
    f = tmp_path / "result.json"
    f.write_text(out)
    code, out2, err = run_main(capsys, *BENCH[:-6], "--random-input-len", "256",
                               "--random-output-len", "16", "--compare", str(f), "--json")  # fmt: skip
    assert code == 0, err
    cmp = json.loads(out2)["moeplan"]["compare"]
    assert json.loads(out2)["max_concurrency"] == 8  # taken from the file
    assert cmp["format"] == "vllm bench serve"
    for k in ("duration", "total_token_throughput", "mean_ttft_ms", "mean_tpot_ms"):
        assert abs(cmp["metrics"][k]["error"]) < 1e-9


def test_compare_reads_the_lengths_a_vllm_result_sent(capsys, tmp_path):
    res = {"duration": 10.0, "num_prompts": 3, "request_rate": "inf", "max_concurrency": None,
           "mean_e2el_ms": 1.0, "input_lens": [100, 200, 300], "output_lens": [5, 6, 7],
           "total_token_throughput": 100.0}  # fmt: skip
    f = tmp_path / "r.json"
    f.write_text(json.dumps(res))
    code, out, err = run_main(capsys, *BENCH[:5], "--compare", str(f), "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert ans["total_input_tokens"] == 600 and ans["total_output_tokens"] == 18


@pytest.mark.parametrize(
    "content, field",
    [
        ('{"foo": 1}', "unknown result format"),
        ('{"mean_e2el_ms": 3.0, "num_prompts": 3}', "duration"),
        ('{"duration": 1, "mean_e2el_ms": 3.0}', "num_prompts"),
        (
            '{"duration": 1, "mean_e2el_ms": 3.0, "num_prompts": 2, "input_lens": [1, -4], '
            '"output_lens": [1, 1]}',
            "input_lens[1]",
        ),
        ("not json", "neither"),
    ],
)
def test_compare_bad_result_is_one_line(capsys, tmp_path, content, field):
    f = tmp_path / "bad.json"
    f.write_text(content)
    code, out, err = run_main(capsys, *BENCH[:5], "--compare", str(f), "--json")
    assert code == 2 and out == ""
    assert field in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "rows, field",
    [
        ("input_len,output_len\n100,10\n-5,10\n", "input_len"),
        ("input_len,output_len\n100,10.5\n", "output_len"),
        ("input_len,output_len\n100,0\n", "output_len"),
        ("input_len\n100\n", "output_len"),
        ("input_len,output_len\nabc,10\n", "input_len"),
    ],
)
def test_dataset_file_with_bad_lengths_is_refused(capsys, tmp_path, rows, field):
    f = tmp_path / "lengths.csv"
    f.write_text(rows)
    code, out, err = run_main(capsys, *BENCH[:5], "--dataset-path", str(f), "--json")
    assert code == 2 and out == ""
    assert field in err and len(err.strip().splitlines()) == 1


def test_dataset_file_jsonl_lengths_are_sent(capsys, tmp_path):
    f = tmp_path / "lengths.jsonl"
    f.write_text('{"input_len": 64, "output_len": 4}\n{"input_len": 128, "output_len": 8}\n')
    code, out, err = run_main(capsys, *BENCH[:5], "--dataset-path", str(f), "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert ans["completed"] == 2 and ans["total_input_tokens"] == 192


@pytest.mark.parametrize(
    "extra, field",
    [
        (("--dataset-name", "sonnet"), "--dataset-name"),
        (("--burstiness", "0.5"), "--burstiness"),
        (("--request-rate", "-1"), "--request-rate"),
        (("--max-concurrency", "0"), "--max-concurrency"),
        (("--pd", "1*attn-tp1:1*attn-tp1", "--max-concurrency", "4"), "--max-concurrency"),
    ],
)
def test_settings_moeplan_cannot_express_are_refused(capsys, extra, field):
    code, out, err = run_main(capsys, *BENCH, *extra, "--json")
    assert code == 2 and out == ""
    assert field in err and len(err.strip().splitlines()) == 1


def test_a_burst_on_a_pd_pair_serves_every_prompt(capsys):
    code, out, err = run_main(capsys, *BENCH, "--pd", "1*attn-tp1:1*attn-tp1", "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert ans["completed"] == 30 and ans["moeplan"]["gpus"] == 2
    # the decode pool streams the first token after the prefill and the KV transfer; the
    # last completion ends the run
    assert ans["duration"] * 1e3 >= ans["p99_e2el_ms"] - 1e-6
    assert ans["mean_ttft_ms"] < ans["mean_e2el_ms"]


def test_compare_reads_an_sglang_bench_serving_line(capsys, tmp_path):
    # python/sglang/bench_serving.py appends one JSON object per run; the last is read
    res = {"dataset_name": "random", "request_rate": float("inf"), "max_concurrency": 4,
           "random_input_len": 256, "random_output_len": 16, "random_range_ratio": 1.0,
           "duration": 2.0, "completed": 30, "mean_e2e_latency_ms": 500.0,
           "input_throughput": 3840.0, "output_throughput": 240.0, "mean_ttft_ms": 50.0}  # fmt: skip
    f = tmp_path / "sglang.jsonl"
    f.write_text(json.dumps({"duration": 1.0}) + "\n" + json.dumps(res) + "\n")
    code, out, err = run_main(capsys, *BENCH[:5], "--compare", str(f), "--json")
    assert code == 0, err
    ans = json.loads(out)
    cmp = ans["moeplan"]["compare"]
    assert cmp["format"] == "sglang.bench_serving"
    # SGLang's rule at range ratio 1: every prompt its full length
    assert ans["total_input_tokens"] == 30 * 256 and ans["max_concurrency"] == 4
    m = cmp["metrics"]
    assert m["total_token_throughput"]["measured"] == pytest.approx(3840.0 + 240.0)
    assert m["mean_e2el_ms"]["measured"] == pytest.approx(500.0)


def _shipped_sharegpt() -> np.ndarray:
    from importlib import resources

    text = resources.files("moeplan").joinpath("data", "benchmarks", "sharegpt_v3_sample.csv")
    rows = text.read_text().splitlines()
    assert rows[0] == "input_len,output_len"
    return np.array([[int(x) for x in r.split(",")] for r in rows[1:]])


def test_shipped_sharegpt_pairs_pass_vllms_filter():
    # vllm/benchmarks/datasets/utils.py is_valid_sequence: both >= 4, prompt <= 1024,
    # prompt + output <= 2048
    a = _shipped_sharegpt()
    assert len(a) == 16384
    assert np.all(a >= 4) and np.all(a[:, 0] <= 1024) and np.all(a.sum(axis=1) <= 2048)
    # the figures its README states
    assert a.mean(axis=0) == pytest.approx([219.6, 199.3], abs=0.05)
    assert a[:, 1].max() == 1853
    first = a[:1000]
    assert first.mean(axis=0) == pytest.approx([215.2, 198.3], abs=0.05)
    assert np.median(first[:, 1]) == 145 and first[:, 1].max() == 863


def test_shipped_sharegpt_is_the_lab_runs_sample():
    """Held-out check of the order: vLLM's seed-0 sample of 1,000 (and of 100) prompts has the
    token totals the lab's ShareGPT runs report (their own tokenizers: within 3 % on prompts,
    6 % on outputs, which end early at the end-of-sequence token), while 1,000 pairs from
    elsewhere in the file are further off."""
    import csv

    from moeplan.commands.validate import shipped_csv

    a = _shipped_sharegpt()
    with open(shipped_csv(), newline="") as f:
        runs = [r for r in csv.DictReader(f) if r["dataset"] == "sharegpt"]
    assert len(runs) > 40
    for r in runs:
        n = int(r["num_prompts"])
        assert float(r["mean_in"]) == pytest.approx(a[:n, 0].mean(), rel=0.03), r["case_id"]
        assert float(r["mean_out"]) == pytest.approx(a[:n, 1].mean(), rel=0.06), r["case_id"]
    # the 100-prompt runs measured 229.5 input tokens per prompt: the file's first 100
    # (the same conversations) say so too, other hundreds do not
    assert a[:100, 0].mean() == pytest.approx(229.5, rel=0.03)
    assert not 0.97 * 229.5 < a[100:200, 0].mean() < 1.03 * 229.5


def test_sharegpt_seed_0_sends_the_file_in_order_other_seeds_a_permutation():
    a = _shipped_sharegpt()
    p = sharegpt_lengths(50, 0)
    assert np.array_equal(p.isl, a[:50, 0]) and np.array_equal(p.osl, a[:50, 1])
    q = sharegpt_lengths(50, 7)
    order = np.random.default_rng(7).permutation(len(a))[:50]
    assert np.array_equal(q.isl, a[order, 0]) and np.array_equal(q.osl, a[order, 1])
    more = sharegpt_lengths(len(a) + 10, 0)  # beyond the sample: drawn again with replacement
    assert len(more.isl) == len(a) + 10
    assert np.array_equal(more.isl[: len(a)], a[:, 0])
    assert "the 10 past the sample drawn again with replacement" in more.source
    assert "replacement" not in p.source


def test_sharegpt_scaled_to_a_runs_means_keeps_its_totals_and_spread():
    p = sharegpt_lengths(1000, 0, (214.5, 199.9))
    raw = sharegpt_lengths(1000, 0)
    assert p.isl.sum() == pytest.approx(214_500, abs=500)  # whole tokens: rounding only
    assert p.osl.sum() == pytest.approx(199_900, abs=500)
    # the same prompts, in the same order, stretched: the ranks are unchanged
    assert np.all(np.diff(p.osl[np.argsort(raw.osl, kind="stable")]) >= 0)
    assert p.osl.max() > 4 * p.osl.mean()  # the long answers that end a burst are there
    assert "longest output 870 tokens" in p.source


def test_bench_sharegpt_sends_the_shipped_lengths(capsys):
    code, out, err = run_main(capsys, *BENCH[:5], "--dataset-name", "sharegpt", "--num-prompts",
                              "20", "--json")  # fmt: skip
    assert code == 0, err
    ans = json.loads(out)
    a = _shipped_sharegpt()[:20]
    assert ans["total_input_tokens"] == int(a[:, 0].sum())
    assert ans["total_output_tokens"] == int(a[:, 1].sum())


def test_grid_priced_decode_steps_match_exact_prices(capsys, monkeypatch):
    """Oracle: the same burst priced exactly (every decode batch size through the cost
    model) — the batch grid moves the run's figures by at most 0.1 % (batches of 200
    sequences: the grid's interpolated range)."""
    import moeplan.serve.iteration.batch_grid as grid

    args = ("bench", "--model", "gpt-oss-20b", "--cluster", "h100-sxm-8", "--num-prompts",
            "203", "--random-input-len", "128", "--random-output-len", "64", "--random-range-ratio",
            "0.5", "--json")  # fmt: skip
    below = grid._grid_below
    between: list[int] = []  # batch sizes the grid interpolated (not on a grid point)

    def spy(b: int) -> tuple[int, int]:
        lo, hi = below(b)
        if lo != b:
            between.append(b)
        return lo, hi

    monkeypatch.setattr(grid, "_grid_below", spy)
    code, out, err = run_main(capsys, *args)
    assert code == 0, err
    got = json.loads(out)
    assert between  # the grid interpolated some decode steps of this run
    monkeypatch.setattr(grid, "EXACT_BELOW", 10**9)  # every decode batch priced exactly
    code, out, err = run_main(capsys, *args)
    assert code == 0, err
    exact = json.loads(out)
    for k in ("duration", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "p99_e2el_ms"):
        assert got[k] == pytest.approx(exact[k], rel=1e-3), k


def _chunks(isl, osl, cfg=CFG, step_s=D):
    p = Prompts(np.asarray(isl, np.int64), np.asarray(osl, np.int64), "test")
    res = simulate(requests_of(p, np.zeros(len(p.isl)), None), cfg, lambda _batch: step_s)
    return merge([(np.arange(len(p.isl)), res)], len(p.isl))


def test_peak_output_tokens_per_s_closed_form():
    """Closed form: 8 identical requests served together, one chunk each at the end of
    every 13 ms iteration (the prefill's first token, then a decode step's): second 0 holds
    iterations 1..76 (76 x 13 ms < 1 s <= 77 x 13 ms), second 1 iterations 77..150."""
    n, osl, step = 8, 150, 0.013
    run = _chunks([100] * n, [osl] * n, step_s=step)
    assert len(run.chunk_s) == n * osl
    m = vllm_metrics(run)
    assert m["max_output_tokens_per_s"] == n * 76
    assert m["duration"] == pytest.approx(osl * step)  # iterations 77..150 fill the second


@pytest.mark.parametrize(
    "cfg",
    [
        CFG,
        EngineConfig(policy="mixed", chunk_tokens=512, max_running=64, kv_tokens=10**6),
        # a small pool: the newest requests are preempted and their prompts recomputed
        EngineConfig(policy="mixed", chunk_tokens=512, max_running=64, kv_tokens=2_000),
        EngineConfig(policy="prefill-first", chunk_tokens=256, max_running=64, kv_tokens=2_000),
    ],
)
def test_every_output_token_reaches_the_client_once(cfg):
    """Conservation oracle: one token per chunk (no MTP), so the chunks the client receives
    are the output tokens, with or without preemption."""
    rng = np.random.default_rng(3)
    isl, osl = rng.integers(20, 300, 60), rng.integers(1, 80, 60)
    run = _chunks(isl, osl, cfg)
    assert len(run.chunk_s) == int(osl.sum())
    # no chunk before its request's send or after the run's last finish
    assert run.chunk_s.min() >= 0 and run.chunk_s.max() <= run.finish_s.max() + 1e-12
    if cfg.kv_tokens == 2_000:
        assert run.preemptions > 0  # the case it covers


def test_bench_pd_and_replicas_deliver_every_output_token(capsys, monkeypatch):
    """Conservation through the P/D pools (first token with the KV, second at the decode
    instance's entry) and through copies of an instance (chunks merged)."""
    import moeplan.commands.bench as bench

    runs = []
    real = bench.vllm_metrics
    monkeypatch.setattr(bench, "vllm_metrics", lambda run: runs.append(run) or real(run))
    for extra in (("--pd", "1*attn-tp1:1*attn-tp1"), ("--replicas", "2")):
        code, out, err = run_main(capsys, *BENCH, *extra, "--json")
        assert code == 0, err
        ans = json.loads(out)
        assert len(runs[-1].chunk_s) == ans["total_output_tokens"], extra
        assert ans["max_output_tokens_per_s"] > 0


def test_outside_graphs_share_closed_form():
    """Iterations of 1, 2, 3, 4 s with 0, 600, 512 and 1,200 decoding sequences: above a
    capture size of 512 are the 2 s and 4 s steps (6 of 10 s); over two attention-DP ranks
    (300, 256, 600 per rank) only the 4 s step."""
    from types import SimpleNamespace

    run = SimpleNamespace(iter_start_s=np.array([0.0, 1.0, 3.0, 6.0]),
                          iter_end_s=np.array([1.0, 3.0, 6.0, 10.0]),
                          iter_decode=np.array([0, 600, 512, 1200]))  # fmt: skip
    assert outside_graphs([run], 1, 512) == pytest.approx(0.6)
    assert outside_graphs([run], 2, 512) == pytest.approx(0.4)
    assert outside_graphs([run, run], 1, 2000) == 0.0


GRAPH_BURST = ["bench", "--cluster", "h100-sxm-8", "--dataset-name", "random",
               "--random-input-len", "214", "--random-output-len", "200",
               "--num-prompts", "1000", "--json"]  # fmt: skip


@pytest.mark.parametrize(
    ("launch", "flagged"),
    [("vllm serve openai/gpt-oss-20b", True),
     ("vllm serve openai/gpt-oss-20b --max-num-seqs 256", False)],
)  # fmt: skip
def test_a_burst_above_the_capture_size_is_flagged(capsys, launch, flagged):
    """vLLM 0.11.0 on an H100 captures decode graphs up to 512 sequences: a burst of 1,000
    prompts it runs at once (its default running cap, 1,024) spends its time above that and
    is flagged; capped at 256 running requests no step can be above (exactly 0)."""
    code, out, err = run_main(capsys, *GRAPH_BURST, "--launch", launch)
    assert code == 0, err
    g = json.loads(out)["moeplan"]["scheduler"]["cuda_graphs"]
    assert g["capture_max_batch_per_rank"] == 512 and g["flagged"] is flagged
    if flagged:
        assert g["engine_time_above_share"] > OUTSIDE_GRAPHS_FLAG
    else:
        assert g["engine_time_above_share"] == 0.0
    from moeplan.commands.bench import text_block  # what the command prints without --json

    assert ("outside CUDA graphs:" in text_block(json.loads(out))) is flagged


def test_serve_sim_states_its_run_outside_cuda_graphs(capsys):
    """serve-sim records the same share for its run: a closed loop of 600 clients on vLLM
    (H100: capture size 512) runs above it (the exact zero below it: the bench test above)."""
    code, out, err = run_main(capsys, "serve-sim", "--model", "qwen3-30b-a3b", "--cluster",
                              "h100-sxm-8", "--engine", "vllm", "--concurrency", "600",
                              "--requests", "1200", "--isl", "214", "--osl", "200", "--json")  # fmt: skip
    assert code == 0, err
    g = json.loads(out)["cuda_graphs"]
    assert g["capture_max_batch_per_rank"] == 512 and g["flagged"] is True
    assert g["engine_time_above_share"] > OUTSIDE_GRAPHS_FLAG
