"""``moeplan recommend``: the sizes it tries, how a size's best fill and bound are read from
the search, and a user's question end to end (its answer checked by ``serve-sim``, the size
below excluded by the search's bound)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from grid import moeplan
from moeplan.commands.recommend import best_fill, bound_per_gpu, sizes
from moeplan.specs import load_cluster


def test_sizes_are_one_nodes_powers_of_two_then_whole_nodes():
    got = [(c.num_nodes, c.gpus_per_node, c.num_gpus) for c in sizes(load_cluster("h100-sxm-8"), 3)]
    assert got == [(1, 1, 1), (1, 2, 2), (1, 4, 4), (1, 8, 8), (2, 8, 16), (3, 8, 24)]


def _served(gpus: int, rate: float, meets: bool = True):
    res = SimpleNamespace(max_rate_meeting_slo_rps=rate, meets_slo=meets)
    return SimpleNamespace(entry=SimpleNamespace(gpus=gpus), result=res)


def _ranking(*served, search=None):
    w = SimpleNamespace(osl=SimpleNamespace(mean=100.0))
    return SimpleNamespace(ranked=served, workload=w, search=search or {})


def test_best_fill_copies_a_deployment_to_fill_the_cluster():
    c = load_cluster("h100-sxm-8")
    big, small, miss = _served(8, 30.0), _served(2, 10.0), _served(1, 99.0, meets=False)
    x, k, total = best_fill(_ranking(big, small, miss), c)
    assert (x, k, total) == (small, 4, 40.0)  # 4 copies of 10 req/s beat one of 30
    assert best_fill(_ranking(miss), c) is None


def test_the_bound_is_the_largest_capacity_or_bound_the_search_states():
    search = {
        "certificate": {"winner_capacity": 500.0, "best_remaining_bound": 450.0},
        "disaggregated": {"best_capacity": 620.0, "best_remaining_bound": 610.0},
    }
    r = _ranking(_served(4, 20.0), search=search)  # 20 req/s x 100 tokens / 4 GPUs = 500
    assert bound_per_gpu(r) == 620.0
    search["certificate"]["best_remaining_bound"] = 700.0
    assert bound_per_gpu(r) == 700.0


QUESTION = ["--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8", "--rate", "40", "--ttft-slo",
         "2000", "--tpot-slo", "50"]  # fmt: skip


@pytest.mark.slow
def test_forty_requests_a_second_is_answered_checked_and_the_size_below_excluded():
    p = moeplan("recommend", *QUESTION, "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["gpus"] >= 1 and out["deployment"]["layout"] and out["certificate"]["certificate"]
    assert out["deployment"]["serves_rps"] >= 40
    assert out["check"]["meets_slo"]
    shares = [r["share"] for r in out["price_sources"].values()]  # the check run's split
    assert abs(sum(shares) - 1.0) < 1e-9 and min(shares) >= 0.0
    below = out["smaller"]
    if out["gpus"] > 1:  # the size below serves less than the rate, by the search's bound
        assert (
            below["infeasible_by_bound"] and below["bound_rps"] < 40 and below["gpus"] < out["gpus"]
        )
    # serve-sim of the answer at the rate meets the SLOs
    # (the check's arguments carry the cluster, engine, lengths, SLOs, requests and seed)
    s = moeplan("serve-sim", "--model", "qwen3-30b-a3b", "--json", "--quiet",
                *out["check"]["serve_sim_args"])  # fmt: skip
    assert s.returncode == 0, s.stderr
    m = json.loads(s.stdout)["metrics"]
    assert m["ttft_p90_s"] <= 2.0 and m["tpot_p90_s"] <= 0.05
    assert m["ttft_p90_s"] == pytest.approx(out["check"]["ttft_p90_s"], rel=1e-6)
