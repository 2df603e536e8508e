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
