"""Multi-token prediction in simulated serving: the engine's progress per step (closed form),
fast-forward against single steps, the iteration price (verify + drafts by layer
differencing), bounds and the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cli_run import run_main
from moeplan.cost import cost_model_for
from moeplan.serve import (
    Batch,
    EngineConfig,
    IterationModel,
    LengthDist,
    ServeLayout,
    ServeWorkload,
    generate,
    requests_from_rows,
    simulate,
)
from moeplan.serve.engine.run import tokens_per_step
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.specs import load_cluster, load_model


class Timed:
    """A fake evaluator with knobs: ``pre`` per prefill iteration, ``dec`` per decode step."""

    def __init__(self, knobs: InstanceKnobs, pre: float = 1.0, dec: float = 0.1) -> None:
        self.knobs, self.pre, self.dec = knobs, pre, dec

    def __call__(self, b: Batch) -> float:
        return self.pre if b.prefill else self.dec + 1e-9 * b.decode * b.decode_ctx


def _cfg(**kw) -> EngineConfig:
    base = {"policy": "prefill-first", "chunk_tokens": 2048, "max_running": 64}
    return EngineConfig(**{**base, "kv_tokens": 1 << 30, **kw})


@pytest.mark.parametrize("n,p,osl", [(1, 0.5, 11), (2, 0.85, 40), (1, 1.0, 2), (3, 0.6, 7)])
def test_lone_request_finishes_after_ceil_steps(n, p, osl):
    """One request: TTFT = its prefill; then ceil((osl - 1) / tau) decode steps,
    tau = 1 + p + ... + p^n; every output token is counted once."""
    kn = InstanceKnobs(mtp=n, mtp_accept=p)
    tau = sum(p**i for i in range(n + 1))
    res = simulate(requests_from_rows([0.0], [100], [osl]), _cfg(), Timed(kn, 1.0, 0.1))
    steps = math.ceil((osl - 1) / tau)
    assert res.first_token_s[0] == pytest.approx(1.0)
    assert res.finish_s[0] == pytest.approx(1.0 + steps * 0.1, rel=1e-6)
    assert res.output_tokens == osl


def test_fast_forward_equals_single_steps_under_mtp():
    """Decode fast-forward with MTP reproduces one step at a time under load, KV included
    (to float rounding of the fractional context sums: a step may see its mean context one
    token apart, 1e-9 s here)."""
    w = ServeWorkload(
        num_requests=150,
        rate=8.0,
        isl=LengthDist.parse("uniform:50:500"),
        osl=LengthDist.parse("uniform:20:300"),
        seed=5,
    )
    ev = Timed(InstanceKnobs(mtp=1, mtp_accept=0.85), 2e-3, 3e-3)
    cfg = _cfg(kv_tokens=15_000, max_running=32)
    fast, slow = (simulate(generate(w), cfg, ev, fast_forward=f) for f in (True, False))
    np.testing.assert_allclose(fast.finish_s, slow.finish_s, rtol=1e-7)
    np.testing.assert_allclose(fast.iter_kv, slow.iter_kv, rtol=1e-9)
    assert fast.preemptions == slow.preemptions
    assert fast.output_tokens == slow.output_tokens == int(generate(w).osl.sum())
    assert float(np.max(fast.iter_kv)) <= cfg.kv_tokens


def test_mtp_halves_the_decode_time_at_full_acceptance():
    """accept 1, one draft: tau = 2, so a lone request's decode takes half the steps."""
    reqs = requests_from_rows([0.0], [100], [201])
    one = simulate(reqs, _cfg(), Timed(InstanceKnobs(), 1.0, 0.1))
    two = simulate(reqs, _cfg(), Timed(InstanceKnobs(mtp=1, mtp_accept=1.0), 1.0, 0.1))
    assert one.finish_s[0] - 1.0 == pytest.approx(200 * 0.1, rel=1e-5)
    assert two.finish_s[0] - 1.0 == pytest.approx(100 * 0.1, rel=1e-5)
    assert tokens_per_step(Timed(InstanceKnobs())) == 1


def test_iteration_price_is_verify_plus_drafts():
    """The MTP step = the plain step with N + 1 tokens per decoding sequence + N passes of
    one MoE decoder layer and the lm-head; the layer's price by differencing a 5-layer and
    a 4-layer DeepSeek-V3 (3 dense layers, then MoE)."""
    c = load_cluster("h200-sxm-8")
    cm = cost_model_for(c)
    lay = ServeLayout(attn_dp=8, moe_ep=8)
    m5, m4 = (load_model("deepseek-v3").with_layers(k) for k in (5, 4))
    n, dec, ctx = 2, 64, 3000
    plain5, plain4 = (IterationModel(m, c, cm, lay) for m in (m5, m4))
    b = Batch(dec, ctx, ())
    layer = plain5.breakdown(b)["period_s"] - plain4.breakdown(b)["period_s"]
    draft = layer + plain4.breakdown(b)["lm_head"]
    mtp = IterationModel(m5, c, cm, lay, knobs=InstanceKnobs(mtp=n, mtp_accept=0.7))
    verify = plain5(Batch(dec * (n + 1), ctx, ()))
    assert mtp(b) == pytest.approx(verify + n * draft, rel=1e-9)
    assert mtp.breakdown(b)["mtp_draft"] == pytest.approx(n * draft, rel=1e-9)
    pre = Batch(0, 0, ((512, 512),))
    assert mtp(pre) == pytest.approx(plain5(pre), rel=1e-12)  # no decode: no speculation


def _cli(capsys, *args):
    return run_main(capsys, *args)


def test_serve_sim_runs_mtp_and_it_raises_decode_throughput(capsys):
    """A simulated closed-loop serve-sim run with --mtp: more output tokens/s than without
    at the same concurrency on a decode-bound workload, TPOT lower."""
    base = ["serve-sim", "--model", "deepseek-v3", "--cluster", "h200-sxm-8", "--attn-dp",
            "8", "--moe-ep", "8", "--concurrency", "32", "--requests", "50", "--isl", "128",
            "--osl", "128", "--max-running", "32", "--chunk-tokens", "8192", "--cost-engine", "none",
            "--json"]  # fmt: skip
    outs = []
    for extra in ([], ["--mtp", "1", "--mtp-accept", "0.8"]):
        code, out, err = _cli(capsys, *base, *extra)
        assert code == 0, out + err
        outs.append(json.loads(out))
    off, on = outs
    assert on["knobs"]["mtp"] == 1 and on["knobs"]["mtp_accept"] == 0.8
    assert on["metrics"]["tpot_p50_s"] < off["metrics"]["tpot_p50_s"]
    assert (
        on["metrics"]["output_tokens_per_s_per_gpu"] > off["metrics"]["output_tokens_per_s_per_gpu"]
    )


def test_capacity_bound_holds_under_mtp():
    """The instance bound (search/capacity/bound.py) stays above what the engine sustains with MTP
    (tau = 1.9 tokens per step): a saturated closed loop's requests/s, no SLO."""
    from moeplan.search.capacity.bound import capacity_bound

    class Linear(Timed):
        def __call__(self, b: Batch) -> float:
            return 1e-3 + 1e-5 * b.tokens + 1e-9 * b.decode * b.decode_ctx

    ev = Linear(InstanceKnobs(mtp=1, mtp_accept=0.9))
    w = ServeWorkload(num_requests=400, rate=None, concurrency=64, isl=LengthDist.parse("100"),
                      osl=LengthDist.parse("200"), seed=1)  # fmt: skip
    cfg = _cfg(max_running=64)
    res = simulate(generate(w), cfg, ev)
    served = len(res.finish_s) / float(res.finish_s.max())
    bound = capacity_bound(ev, [cfg], w).rate_rps
    assert bound >= served
    assert bound < 1.5 * served  # and it is a bound of this engine, not of any


def test_wrapped_evaluators_keep_the_mtp_progress():
    """The deployment search wraps iteration models (GridEvaluator): the engine still
    advances tau tokens per step under the wrapper, as the price assumes."""
    from moeplan.serve.iteration.batch_grid import GridEvaluator

    kn = InstanceKnobs(mtp=2, mtp_accept=0.5)
    assert tokens_per_step(GridEvaluator(Timed(kn))) == pytest.approx(1.75)
    assert tokens_per_step(GridEvaluator(Timed(InstanceKnobs()))) == 1
