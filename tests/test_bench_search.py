"""``moeplan bench --search``: every launch of one engine server ranked.

Oracles: the ranking equals separate ``moeplan bench --launch`` runs of every launch of
:func:`launch_space` on the same prompts (exhaustive), best first; bad input is one line."""

from __future__ import annotations

import json

import pytest

from cli_run import run_main
from moeplan.commands.lab_plan import launch_space

ARGS = ("--model", "gpt-oss-20b", "--cluster", "h100-sxm-8", "--engine", "vllm",
        "--num-prompts", "40", "--random-input-len", "500", "--random-output-len", "50")  # fmt: skip


def test_search_ranks_every_launch_as_bench_runs_it(capsys):
    code, out, err = run_main(capsys, "bench", *ARGS, "--search", "--search-gpus", "1,2", "--json")
    assert code == 0, err
    ans = json.loads(out)
    repo = "openai/gpt-oss-20b"  # the preset's checkpoint: what the launch loads
    launches = launch_space("vllm", repo, 1) + launch_space("vllm", repo, 2)
    assert sorted(r["launch"] for r in ans["ranked"]) == sorted(launches)
    figures = [r["total_token_throughput"] for r in ans["ranked"]]
    assert figures == sorted(figures, reverse=True)
    for r in ans["ranked"]:
        code, o, e = run_main(capsys, "bench", *ARGS, "--launch", r["launch"], "--json")
        assert code == 0, e
        alone = json.loads(o)
        assert r["total_token_throughput"] == pytest.approx(
            alone["total_token_throughput"], rel=1e-9
        )
        assert r["gpus"] == alone["moeplan"]["gpus"]
        assert r["cuda_graphs"] == alone["moeplan"]["scheduler"]["cuda_graphs"]


def test_search_marks_the_launches_run_outside_cuda_graphs():
    """The table marks each flagged launch and says what the mark means; none unflagged."""
    from moeplan.commands.bench_search import search_text

    def launch(flagged: bool) -> dict:
        return {"gpus": 1, "total_token_throughput": 1000.0, "total_token_throughput_per_gpu": 1000.0,
                "mean_ttft_ms": 10.0, "mean_tpot_ms": 5.0, "launch": f"vllm serve m {flagged}",
                "cuda_graphs": {"capture_max_batch_per_rank": 512, "flagged": flagged,
                                "engine_time_above_share": 0.5 if flagged else 0.0}}  # fmt: skip

    out = {"engine": "vllm", "cluster": "h100-sxm-8", "model": "m", "prompts": "p",
           "ranked": [launch(True), launch(False)], "refused": []}  # fmt: skip
    lines = search_text(out).splitlines()
    assert "1,000*" in lines[2] and "1,000*" not in lines[3]
    assert lines[-1].startswith("* 1 launch(es) spend over 10% of their engine time")
    out["ranked"] = [launch(False)]
    assert "*" not in search_text(out)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (("--search", "--attn-tp", "2"), "--attn-tp (2) is what --search varies"),
        (("--search", "--search-gpus", "16"), "--search-gpus (16) must be in 1..8"),
        (("--search", "--search-gpus", "two"), "--search-gpus ('two') must be"),
        (("--search-gpus", "2"), "--search-gpus needs --search"),
        (("--search", "--launch", "vllm serve gpt-oss-20b"), "--launch is one launch"),
        (("--search", "--engine", "tgi"), "--engine ('tgi') must be one of"),
    ],
)
def test_search_bad_input_is_one_line(capsys, extra, words):
    code, out, err = run_main(capsys, "bench", *ARGS, *extra)
    assert code == 2 and not out
    assert words in err and len(err.strip().splitlines()) == 1
