"""Iteration-level engine model: continuous batching as SGLang and vLLM V1 schedule it.

Policies (:class:`EngineConfig`):

- ``prefill-first`` (SGLang's default scheduler): when prefill work can be admitted, the
  iteration is a prefill batch of up to ``chunk_tokens`` prompt tokens (the request being
  chunked first, then new requests in arrival order; decoding requests wait); otherwise it is
  a decode batch of every decoding request. ``chunk_tokens = 0`` disables chunking.
- ``mixed`` (vLLM V1, SGLang ``--enable-mixed-chunk``): every decoding request contributes one
  token, the rest of the ``chunk_tokens`` budget goes to prompt chunks.

Requests are admitted in arrival order (FCFS, no skipping) while ``max_running`` and the KV
pool allow: admission allocates the whole (re)prefill — prompt plus tokens already generated,
the prefix-cache hit included — and requires room for ``admit_reserve`` times the outstanding
output tokens of every request running before the iteration (SGLang's ``new_token_ratio``;
vLLM allocates on demand: 0) plus ``admit_reserve_new`` times those of the requests the
iteration admits, itself included (SGLang: 1, a new request's whole ``max_new_tokens``;
None: ``admit_reserve``). Each decode step allocates one token per decoding request; when the pool is full
the most recently admitted request is preempted (vLLM's recompute preemption: its KV is freed,
it goes back to the head of the queue, and later re-prefills its prompt and generated tokens,
counted separately as recomputed tokens). The pool is never over-committed (checked).

Timing: the last prefill chunk of a request produces its first token (TTFT = end of that
iteration); each later decode step produces one token — or, when the evaluator prices
multi-token prediction (its ``knobs.mtp > 0``: :mod:`moeplan.serve.iteration.mtp`),
``tau = knobs.tokens_per_step`` tokens in expectation: a decoding request's context, KV and
output grow by ``tau`` per step and it finishes after ``ceil(remaining / tau)`` steps (the
KV of the last step's surplus is freed with the request; ITL samples are the gaps between
steps, each delivering ``tau`` tokens on average). One decision for price and progress: the
evaluator's knobs. Iteration times come from an
evaluator ``Batch -> seconds`` (:class:`moeplan.serve.iteration.model.IterationModel` or a test
fake); decode contexts and prefill chunks' contexts are both rounded to the grid of
:func:`bucket` before the call (the midpoint of a cell of relative width 1/64 to 1/32: error
at most 1/64 of the context either way, exact below 64 tokens; a prefill chunk ending at
2,048 tokens is priced at 2,080).

Event order: at equal times arrivals are queued before an iteration end schedules the next
batch, so a request arriving exactly when an iteration ends joins the next one; arrivals at
equal times queue in request order. A closed loop keeps its events on a heap keyed
``(time, priority, seq)`` (arrivals priority 0, iteration ends 1); an open loop needs none —
its arrivals come sorted and one iteration at most is in flight — and merges the two streams
in the same order. A pool of one-token requests (P/D prefill instances) runs as the
first-come-first-served chunk queue it reduces to (:mod:`moeplan.serve.engine.prefill`, equal
bit for bit). An open loop without MTP runs on the general loop with its per-request steps
reduced to what they are while nothing is preempted, further for a P/D decode instance's pool
(:mod:`moeplan.serve.engine.unpreempted`, equal bit for bit; a run that comes to preempt runs
on the general engine instead, from the start). The general loop is in
:mod:`moeplan.serve.engine.loop`.

Attention-DP ranks are modelled as one scheduler over their pooled KV with balanced dispatch
(the iteration time takes the busiest rank); a request must fit in one rank's pool.
"""

from __future__ import annotations

from collections.abc import Callable

from moeplan.serve.engine.config import POLICIES, EngineConfig, Evaluator, SimResult
from moeplan.serve.engine.loop import Engine
from moeplan.serve.engine.state import one_token_prompts, tokens_per_step
from moeplan.serve.engine.unpreempted import DecodePoolEngine, NeedsPreemption, UnpreemptedEngine
from moeplan.serve.iteration.grid import bucket
from moeplan.serve.workload.arrivals import Requests

__all__ = [
    "POLICIES",
    "Engine",
    "EngineConfig",
    "Evaluator",
    "SimResult",
    "bucket",
    "simulate",
    "tokens_per_step",
]


def simulate(
    reqs: Requests,
    cfg: EngineConfig,
    evaluate: Evaluator,
    *,
    fast_forward: bool = True,
    horizon_s: float | None = None,
    stop: Callable[[Engine], bool] | None = None,
) -> SimResult:
    """Run ``reqs`` through the engine ``cfg`` with iteration times from ``evaluate``.

    ``fast_forward=False`` steps decode iterations one at a time (the reference the
    fast-forward is tested against). ``horizon_s``: stop at the first event after this time
    (requests not finished by then keep NaN first-token / finish times). ``stop``: asked
    every :data:`STOP_EVERY` iteration ends (``engine.now`` = the last iteration's start,
    ``engine.first`` / ``engine.finish`` the times so far); True stops the run the same way."""
    args = (reqs, cfg, evaluate, fast_forward, horizon_s, stop)
    if (
        fast_forward
        and not reqs.closed
        and int(reqs.osl.max()) > 1
        and tokens_per_step(evaluate) == 1
    ):
        pool = cfg.policy == "mixed" and one_token_prompts(reqs.isl, reqs.cached, reqs.osl)
        try:
            return (DecodePoolEngine if pool else UnpreemptedEngine)(*args).run()
        except NeedsPreemption:
            pass  # the general engine, from the start
    return Engine(*args).run()
