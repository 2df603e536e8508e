"""vLLM's scheduler budgets are per DP engine rank (serve/knobs.py): an attention-DP instance
runs ``attn_dp`` schedulers, each with vLLM's own defaults (engine/arg_utils.py: 8192 batched
tokens and 1024 sequences on >= 70 GiB GPUs except A100, else 2048 and 256)."""

from __future__ import annotations

import pytest

from doc_figures import pinned
from moeplan.backends import backend
from moeplan.cost.memory import KVPool
from moeplan.planners.layout import Layout
from moeplan.serve.knobs import candidates, engine_config
from moeplan.serve.layout import kv_capacity_tokens
from moeplan.specs import load_cluster, load_model

MODEL = load_model("qwen3-30b-a3b")


def pool(seqs: int, tokens: int) -> KVPool:
    """vLLM's default KV pool of one rank: 0.9 of the GPU holds everything the instance
    allocates; its profile charges 0.2 GiB of non-torch memory and the dummy sampler run of
    the rank's ``min(seqs, tokens)`` rows (28 bytes per logit)."""
    rows = min(seqs, tokens)
    return KVPool("total", 0.9, reserve=0.2 * 1024**3, profile=28.0 * rows * MODEL.vocab_size,
                  window_block=16)  # fmt: skip


H100, A100 = load_cluster("h100-sxm-8"), load_cluster("a100-sxm-8")


@pytest.mark.parametrize(("cluster", "seqs", "tokens"), [(H100, 1024, 8192), (A100, 256, 2048)])
@pytest.mark.parametrize("dp", [1, 4, 8])
def test_defaults_are_per_dp_rank(cluster, seqs, tokens, dp):
    lay = Layout(attn_dp=dp, moe_ep=dp)
    cfg = engine_config("vllm", MODEL, cluster, lay)
    assert (cfg.max_running, cfg.chunk_tokens) == (seqs * dp, tokens * dp)
    # the KV pool of a rank leaves room for that rank's own step, not the instance's
    assert cfg.kv_tokens_per_rank == kv_capacity_tokens(
        MODEL, cluster, lay, tokens, pool=pool(seqs, tokens)
    )
    # exported per rank: the flag is vLLM's own default again
    assert backend("vllm").chunk_args(cfg.chunk_tokens, dp) == ["--max-num-batched-tokens", str(tokens)]  # fmt: skip


def test_given_budgets_are_the_instances():
    lay = Layout(attn_dp=4, moe_ep=4)
    cfg = engine_config("vllm", MODEL, H100, lay, chunk_tokens=16384, max_running=512)
    assert (cfg.chunk_tokens, cfg.max_running) == (16384, 512)
    assert cfg.kv_tokens_per_rank == kv_capacity_tokens(
        MODEL, H100, lay, 4096, pool=pool(128, 4096)
    )


def test_search_candidates_scale_with_the_dp_ranks():
    one = candidates("vllm", MODEL, H100, Layout(attn_dp=1, moe_ep=4, attn_tp=4))
    four = candidates("vllm", MODEL, H100, Layout(attn_dp=4, moe_ep=4))
    assert sorted({c.chunk_tokens for c in four}) == [4 * c for c in sorted({c.chunk_tokens for c in one})]  # fmt: skip
    assert max(c.max_running for c in four) == 4 * max(c.max_running for c in one)


def test_the_docs_figures_are_the_per_rank_defaults():
    """BENCHMARKS.md's figures (docs/benchmarks/data/vllm-dp-budgets.json) are the budgets
    of one DP rank on H100."""
    cfg = engine_config("vllm", MODEL, H100, Layout(attn_dp=1, moe_ep=1))
    assert pinned("vllm-dp-budgets") == {
        "h100_max_num_seqs_per_dp_rank": cfg.max_running,
        "h100_max_num_batched_tokens_per_dp_rank": cfg.chunk_tokens,
    }
