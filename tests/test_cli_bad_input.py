"""Bad input of ``moeplan plan`` and ``moeplan serve-sim``: a deployment larger than the
cluster, SLOs the layout cannot meet at any rate, ``--requests`` too small for a steady
estimate. Each is one line saying what is wrong and the closest figure that would be
accepted, exit 2, nothing written; the figure offered is checked to be accepted."""

from __future__ import annotations

import json
import math
import re

import pytest

from cli_run import run_main
from moeplan.commands.steady import check_requests, min_requests
from moeplan.errors import MoeplanError

QWEN = ("--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-8")
SHORT = ("--isl", "128", "--osl", "16", "--requests", "100", "--quiet")  # quick runs
Z95 = 1.959963984540054  # two-sided 95 % normal quantile


def _one_line(capsys, *args: str) -> str:
    code, out, err = run_main(capsys, *args)
    assert code == 2 and out == "", (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("pct", [50.0, 90.0, 99.0])
def test_min_requests_is_the_closed_form_of_the_percentile_bound(pct):
    """n q + z sqrt(n q (1-q)) <= n  <=>  n >= z^2 q / (1-q): 4, 35 and 381 requests."""
    q = pct / 100
    want = math.ceil(Z95**2 * q / (1 - q))
    assert min_requests(pct) == want
    check_requests(want, pct)
    with pytest.raises(MoeplanError, match=f"use --requests {want} or more"):
        check_requests(want - 1, pct)


@pytest.mark.parametrize(("ci", "want"), [(0.10, 120), (0.02, 35), (math.inf, 35)])
def test_a_capacity_that_cannot_bound_its_percentile_is_refused_with_its_figure(ci, want):
    """serve-sim after its capacity search (30 requests cannot bound a p90): the figure it
    measured and the larger of the percentile's 35 and the interval's n (ci / 5 %)^2."""
    from moeplan.commands.steady import require_boundable

    rec = {"percentile_boundable": False, "measured_requests": 30, "ci95_half_width_rel": ci,
           "output_tokens_per_s_per_gpu": 1234.5}  # fmt: skip
    with pytest.raises(MoeplanError) as info:
        require_boundable(rec, "attn TP1xDP1 / MoE TP1xEP1", 90.0)
    msg = str(info.value)
    assert "--requests (30) is too small" in msg and "1,234.5 output tokens/s per GPU" in msg
    assert msg.endswith(f"try --requests {want}") and "at least 35" in msg
    require_boundable({**rec, "percentile_boundable": True}, "x", 90.0)  # bounded: no error


def test_plan_refuses_too_few_requests_with_the_closest_count(capsys, tmp_path):
    out = tmp_path / "o"
    line = _one_line(capsys, "plan", *QWEN, "--requests", "20", "--out", str(out))
    assert "--requests (20) is too small" in line and "--requests 50" in line
    line = _one_line(capsys, "plan", *QWEN, "--requests", "100", "--slo-percentile", "99",
                     "--out", str(out))  # fmt: skip
    assert "--requests 381" in line
    assert not out.exists()


def test_replicas_past_the_cluster_name_the_replicas_and_nodes_that_fit(capsys):
    """3 copies of a 4-GPU instance on 8 GPUs: 8 // 4 = 2 fit; ceil(12 / 8) = 2 nodes hold
    them. Refused before any simulation."""
    line = _one_line(capsys, "serve-sim", *QWEN, "--attn-tp", "4", "--moe-tp", "4",
                     "--replicas", "3")  # fmt: skip
    assert "needs 12 GPUs" in line and "has 8" in line
    assert "--replicas 2" in line and "--nodes 2" in line


@pytest.mark.parametrize(("nodes", "tp", "want_nodes"), [(None, 16, 2), ("3", 32, 4)])
def test_a_layout_past_the_cluster_names_the_nodes_that_hold_it(capsys, nodes, tp, want_nodes):
    extra = ("--nodes", nodes) if nodes else ()
    line = _one_line(capsys, "serve-sim", *QWEN, *extra, "--attn-tp", str(tp),
                     "--moe-tp", str(tp))  # fmt: skip
    assert f"needs {tp} GPUs" in line and f"--nodes {want_nodes} gives {want_nodes * 8}" in line


def test_a_pd_pair_past_the_cluster_names_the_nodes(capsys):
    line = _one_line(capsys, "serve-sim", *QWEN, "--pd", "3*attn-tp2.moe-tp2:2*attn-tp2.moe-tp2")
    assert "needs 10 GPUs" in line and "--nodes 2" in line


def test_replicas_with_a_closed_loop_are_refused_not_ignored(capsys):
    line = _one_line(capsys, "serve-sim", *QWEN, "--replicas", "2", "--concurrency", "4")
    assert "--replicas (2)" in line and "--concurrency" in line


def test_serve_sim_unreachable_slo_gives_a_tpot_the_layout_meets(capsys):
    """TPOT 1 ms on one H100: refused with the layout's light-load p90 TPOT; that figure,
    given as the SLO, is met (the capacity search finds a rate)."""
    line = _one_line(capsys, "serve-sim", *QWEN, *SHORT, "--tpot-slo", "1")
    assert "no rate meets the SLOs (TPOT p90 <= 1 ms)" in line
    got = re.search(r"--tpot-slo ([0-9.]+)", line)
    assert got is not None, line
    code, out, err = run_main(capsys, "serve-sim", *QWEN, *SHORT, "--tpot-slo", got[1], "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["meets_slo"] and res["metrics"]["max_rate_meeting_slo_rps"] > 0


def test_a_sub_millisecond_slo_is_printed_as_given(capsys):
    code, out, err = run_main(capsys, "serve-sim", *QWEN, "--concurrency", "2", "--requests",
                              "10", "--isl", "128", "--osl", "8", "--tpot-slo", "0.5")  # fmt: skip
    assert code == 0, err
    assert re.search(r"TPOT [0-9.]+ / 0\.5 ms: .*misses", " ".join(out.split())), out


def test_plan_unreachable_slo_is_one_line_with_the_best_tpot_and_no_out_folder(capsys, tmp_path):
    out = tmp_path / "o"
    line = _one_line(capsys, "plan", *QWEN, "--layers", "4", "--tpot-slo", "0.01", "--quiet",
                     "--out", str(out))  # fmt: skip
    assert "no deployment meets the SLOs" in line and "the best TPOT" in line
    assert not out.exists()


@pytest.mark.parametrize(("command", "replicas"), [("plan", 1), ("serve-sim", 1), ("serve-sim", 2)])
def test_a_rate_past_what_a_steady_run_simulates_is_refused_with_the_largest(
    capsys, tmp_path, command, replicas
):
    """--rate 1e6 at the default SLOs (lifetime 2 s + 256 x 100 ms = 27.6 s): warm-up and
    drain are 3 lifetimes of arrivals per instance, so at most (2 M - 1000 measured) / (3 x
    27.6 s) req/s per instance run; was a MemoryError (or the OOM killer) minutes later."""
    from moeplan.commands.steady import MAX_SIMULATED

    largest = math.floor((MAX_SIMULATED - 1000) / (3 * 27.6) * replicas)
    out = tmp_path / "o"
    extra = ["--out", str(out)] if command == "plan" else ["--replicas", str(replicas)]
    line = _one_line(capsys, command, *QWEN, "--rate", "1e6", "--requests", "1000", *extra)
    assert "--rate (1e+06 req/s) is past what a steady run simulates" in line
    assert f"the largest --rate simulated here is {largest:,} req/s" in line
    assert not out.exists()


def test_the_largest_rate_offered_is_accepted_and_one_more_is_not():
    from moeplan.commands.steady import MAX_SIMULATED, check_rate
    from moeplan.serve import SLO, LengthDist, ServeWorkload

    w = ServeWorkload(num_requests=1000, rate=1.0, isl=LengthDist(mean=2048),
                      osl=LengthDist(mean=256))  # fmt: skip
    slo = SLO(ttft_s=2.0, tpot_s=0.1)
    largest = math.floor((MAX_SIMULATED - 1000) / (3 * 27.6))
    check_rate(largest, 1, w, slo)
    with pytest.raises(MoeplanError, match=f"is {largest:,} req/s"):
        check_rate(largest + 1, 1, w, slo)
