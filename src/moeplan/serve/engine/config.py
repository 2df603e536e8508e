"""The engine's inputs and outputs: scheduler knobs and a run's record (the memo-key grid is in
:mod:`.grid`).

Kept apart from :mod:`moeplan.serve.engine.run` (the event loop) so planners and the CLI can
build configurations and read results without the scheduler; see that module for the
semantics of every knob.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from moeplan.errors import require
from moeplan.serve.iteration.model import Batch

POLICIES = ("prefill-first", "mixed")
# Iteration ends between two calls of a stop predicate: the engine's choice (a predicate
# scans the measured requests, an iteration end touches a few; the stop comes at most 32
# iterations late).
STOP_EVERY = 32

Evaluator = Callable[[Batch], float]


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineConfig:
    """Scheduler knobs; ``kv_tokens`` is the pooled KV capacity, ``kv_tokens_per_rank`` one
    attention-DP rank's pool (the largest request it can hold)."""

    policy: str = "prefill-first"
    chunk_tokens: int = 8192
    max_running: int = 1024
    kv_tokens: int
    kv_tokens_per_rank: int = 0  # 0: same as kv_tokens
    admit_reserve: float = 0.0
    #: the share of its outstanding output a request reserves in the iteration that admits
    #: it (None: ``admit_reserve``); later iterations count it at ``admit_reserve``
    admit_reserve_new: float | None = None
    #: the engine's memory fraction the KV pool was sized at (None: no engine rule)
    mem_fraction: float | None = None
    #: KV tokens a request holds from its admission to its end besides its context (the
    #: blocks of its sliding-window layers in a pool that shares them,
    #: :func:`moeplan.cost.memory.window_tokens_per_seq`)
    seq_kv: int = 0

    def __post_init__(self) -> None:
        require(
            self.policy in POLICIES, f"engine.policy ({self.policy!r}) must be one of {POLICIES}"
        )
        require(self.chunk_tokens >= 0, f"engine.chunk_tokens ({self.chunk_tokens}) must be >= 0")
        require(self.max_running >= 1, f"engine.max_running ({self.max_running}) must be >= 1")
        require(self.kv_tokens >= 1, f"engine.kv_tokens ({self.kv_tokens}) must be >= 1")
        require(self.seq_kv >= 0, f"engine.seq_kv ({self.seq_kv}) must be >= 0")
        require(
            0.0 <= self.admit_reserve <= 1.0,
            f"engine.admit_reserve ({self.admit_reserve}) must be in [0, 1]",
        )
        require(
            self.admit_reserve_new is None or 0.0 <= self.admit_reserve_new <= 1.0,
            f"engine.admit_reserve_new ({self.admit_reserve_new}) must be in [0, 1]",
        )
        if self.policy == "mixed":
            require(
                self.chunk_tokens > self.max_running,
                f"engine.chunk_tokens ({self.chunk_tokens}) must exceed max_running "
                f"({self.max_running}) under the mixed policy (decodes share the budget)",
            )
        if self.kv_tokens_per_rank == 0:
            object.__setattr__(self, "kv_tokens_per_rank", self.kv_tokens)


@dataclass(frozen=True, kw_only=True, slots=True)
class SimResult:
    """Everything a run produced (times in seconds, counts in tokens unless named)."""

    arrival_s: np.ndarray
    admit_s: np.ndarray  # start of the iteration that first admitted the request
    first_token_s: np.ndarray
    finish_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    iter_start_s: np.ndarray
    iter_end_s: np.ndarray
    iter_decode: np.ndarray  # decode tokens per iteration
    iter_prefill: np.ndarray  # prefill tokens per iteration (recomputation included)
    iter_kv: np.ndarray  # KV tokens allocated during the iteration
    itl_s: np.ndarray  # inter-token gaps, weighted by itl_weight
    itl_weight: np.ndarray
    kv_capacity: int
    preemptions: int
    prefill_tokens: int  # first-time prompt tokens prefilled (cache hits excluded)
    recomputed_tokens: int  # re-prefilled after preemption
    output_tokens: int
    #: when a prompt's completion delivered a token other than its request's first one: a
    #: preempted request's recomputed prompt (its next token), a P/D decode instance's entry
    #: (the request's second token); with ``first_token_s`` and one token (one chunk) per
    #: decoding request at each iteration's end (``iter_decode``), every chunk the client
    #: receives (:func:`moeplan.commands.bench.chunk_times`)
    resumed_s: np.ndarray
