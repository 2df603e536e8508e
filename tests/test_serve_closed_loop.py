"""Closed-loop clients (``concurrency``, ``think_s``) against the interactive response-time
law and the bench_serving behaviour they model (think 0: resend at once, in lockstep)."""

from __future__ import annotations

import numpy as np
import pytest

from moeplan.cli import main
from moeplan.serve import EngineConfig, LengthDist, ServeWorkload, generate, simulate

CFG = EngineConfig(policy="prefill-first", chunk_tokens=2048, max_running=64, kv_tokens=1 << 30)


def linear(batch) -> float:
    """An iteration costs 5 ms plus 20 us per prompt token and 0.1 ms per decoding request."""
    prompt = sum(q for q, _ in batch.prefill)
    return 5e-3 + 2e-5 * prompt + 1e-4 * batch.decode


def _closed(clients: int, think_s: float, n: int = 1500) -> ServeWorkload:
    return ServeWorkload(
        num_requests=n,
        rate=None,
        concurrency=clients,
        think_s=think_s,
        isl=LengthDist(kind="fixed", mean=512),
        osl=LengthDist(kind="fixed", mean=64),
        seed=3,
    )


@pytest.mark.parametrize(("clients", "think"), [(8, 0.05), (32, 0.2), (16, 1.0)])
def test_response_time_law_clients_equal_throughput_times_latency_plus_think(clients, think):
    """N = X (R + Z) over the run (Jain, The Art of Computer Systems Performance Analysis,
    §33.2): X completions per second, R mean latency, Z the mean think time drawn."""
    reqs = generate(_closed(clients, think))
    res = simulate(reqs, CFG, linear)
    latency = res.finish_s - res.arrival_s
    x = len(latency) / float(res.finish_s.max())
    z = float(reqs.think_s.mean())
    assert x * (latency.mean() + z) == pytest.approx(clients, rel=0.05)


def test_no_think_time_is_lockstep_and_think_time_staggers():
    """Think 0 (bench_serving --max-concurrency): every client starts at 0 and with fixed
    lengths finishes and resends together — one latency for all; a think time spreads them."""
    burst = simulate(generate(_closed(16, 0.0, 320)), CFG, linear)
    assert np.all(burst.arrival_s[:16] == 0.0)
    e2e = burst.finish_s - burst.arrival_s
    assert np.ptp(e2e[16:]) == pytest.approx(0.0, abs=1e-9)
    spread = simulate(generate(_closed(16, 0.2, 320)), CFG, linear)
    assert len(set(spread.arrival_s[:16].tolist())) == 16  # staggered start
    ttft = spread.first_token_s - spread.arrival_s
    assert np.percentile(ttft, 90) < np.percentile(ttft, 99)


def test_think_time_needs_a_closed_loop():
    with pytest.raises(ValueError, match="think_s"):
        ServeWorkload(num_requests=10, rate=1.0, think_s=0.5)


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency", "1000000000"],
        ["--concurrency", "2000", "--requests", "1000"],
        ["--rate", "2", "--think-ms", "100"],
        ["--concurrency", "4", "--think-ms", "-1"],
    ],
)
def test_cli_refuses_clients_past_the_requests_and_stray_think_times(args, capsys):
    with pytest.raises(SystemExit) as ex:
        main(
            [
                "serve-sim",
                "--model",
                "mixtral-8x7b",
                "--cluster",
                "h100-sxm-8",
                "--moe-ep",
                "8",
                "--attn-tp",
                "8",
                *args,
            ]
        )
    assert ex.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("moeplan: error: --")


def test_the_no_plan_error_names_a_closed_loop_load_not_a_missing_rate():
    from moeplan.search.ranking.views import _load

    assert _load(_closed(64, 0.0)) == "64 clients in a closed loop"
    assert _load(_closed(8, 0.25)) == "8 clients in a closed loop, 250 ms mean think time"
    assert _load(ServeWorkload(rate=2.5)) == "rate 2.5 req/s"
