"""Placement metrics on the held-out split (Sem-MoE, paper 002, §3.1 and §4.5-4.6).

Streaming tallies per MoE layer, then one summary per method:

- ``lar``: local activation rate, activations whose expert sits on the token's source device
  (its DP rank, or its shuffled TP rank) over all activations;
- ``imbalance``: max / mean of per-device expert load (activations), averaged over layers;
  ``balancedness`` is SGLang's mean / max; per-layer lists are kept as well;
- ``a2a_bytes_per_layer``: bytes an all-to-all moves per MoE layer for a step of
  ``step_tokens`` tokens: non-local activations x hidden bytes x 2 (dispatch and combine),
  the paper's volume formula (one copy per remote activation; DeepEP's per-rank
  de-duplication would send less — not modelled);
- ``moe_layer_time_s``: mean over layers of ``evaluate(tokens per expert on the busiest GPU,
  experts per GPU, bytes the busiest rank sends)``, i.e. expert FFN on the most-loaded GPU
  plus dispatch and combine all-to-all, from the cost model (see ``placement.cost_evaluator``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

# evaluate(tokens_per_expert, num_local_experts, a2a_send_bytes) -> seconds of one MoE layer
Evaluator = Callable[[float, int, float], float]


@dataclass(kw_only=True, slots=True)
class Tally:
    """Running counts over test chunks (mutable accumulator, internal)."""

    num_layers: int
    ep: int
    local: np.ndarray = field(init=False)
    total: np.ndarray = field(init=False)
    load: np.ndarray = field(init=False)
    send: np.ndarray = field(init=False)
    src_tokens: np.ndarray = field(init=False)
    tokens: int = 0

    def __post_init__(self) -> None:
        self.local = np.zeros(self.num_layers)
        self.total = np.zeros(self.num_layers)
        self.load = np.zeros((self.num_layers, self.ep))
        self.send = np.zeros((self.num_layers, self.ep))
        self.src_tokens = np.zeros((self.num_layers, self.ep))

    def add(self, experts: np.ndarray, y: np.ndarray, src: np.ndarray) -> None:
        """experts [n, L, k]; src [n, L] source devices; y [L, E] device of each expert, or
        replica counts [L, E, C] (redundant slots: local if any replica sits on the source
        device, else the activation is split evenly over the expert's replicas)."""
        if y.ndim == 3:
            self._add_replicated(experts, y, src)
            return
        ep = self.ep
        self.tokens += experts.shape[0]
        for layer in range(self.num_layers):
            ex = experts[:, layer].astype(np.int64)
            valid = ex >= 0
            dev = y[layer][np.maximum(ex, 0)]
            s = np.broadcast_to(src[:, layer][:, None], ex.shape)
            loc = valid & (dev == s)
            self.local[layer] += loc.sum()
            self.total[layer] += valid.sum()
            self.load[layer] += np.bincount(dev[valid], minlength=ep)
            self.send[layer] += np.bincount(s[valid & ~loc], minlength=ep)
            self.src_tokens[layer] += np.bincount(src[:, layer], minlength=ep)

    def _add_replicated(self, experts: np.ndarray, rep: np.ndarray, src: np.ndarray) -> None:
        ep = self.ep
        self.tokens += experts.shape[0]
        frac = rep / np.maximum(rep.sum(axis=2, keepdims=True), 1e-12)  # [L, E, C]
        for layer in range(self.num_layers):
            ex = experts[:, layer].astype(np.int64)
            valid = ex >= 0
            s = np.broadcast_to(src[:, layer][:, None], ex.shape)
            loc = valid & (rep[layer][np.maximum(ex, 0), s] > 0)
            remote = valid & ~loc
            self.local[layer] += loc.sum()
            self.total[layer] += valid.sum()
            per_expert = np.bincount(ex[remote], minlength=rep.shape[1])
            self.load[layer] += np.bincount(s[loc], minlength=ep) + per_expert @ frac[layer]
            self.send[layer] += np.bincount(s[remote], minlength=ep)
            self.src_tokens[layer] += np.bincount(src[:, layer], minlength=ep)


def summarize(
    t: Tally, *, num_experts: int, hidden_bytes: int, step_tokens: int, evaluate: Evaluator
) -> dict[str, object]:
    """Metrics dict of one method (JSON-able)."""
    ep = t.ep
    n = max(t.tokens, 1)
    lar_l = t.local / np.maximum(t.total, 1)
    mean_load = t.load.mean(axis=1)
    imb_l = t.load.max(axis=1) / np.maximum(mean_load, 1e-12)
    remote_per_token = (t.total - t.local) / n
    a2a_l = 2.0 * remote_per_token * step_tokens * hidden_bytes
    per_gpu = num_experts // ep
    times = []
    for layer in range(t.num_layers):
        busiest = t.load[layer].max() / n * step_tokens
        send = t.send[layer].max() / n * step_tokens * hidden_bytes
        times.append(evaluate(busiest / per_gpu, per_gpu, send))
    src_imb = t.src_tokens.max(axis=1) / np.maximum(t.src_tokens.mean(axis=1), 1e-12)
    return {
        "lar": float(t.local.sum() / max(t.total.sum(), 1)),
        "imbalance": float(imb_l.mean()),
        "balancedness": float((1.0 / np.maximum(imb_l, 1e-12)).mean()),
        "a2a_bytes_per_layer": float(a2a_l.mean()),
        "moe_layer_time_s": float(np.mean(times)),
        "token_imbalance": float(src_imb.mean()),
        "lar_per_layer": [float(v) for v in lar_l],
        "imbalance_per_layer": [float(v) for v in imb_l],
        "a2a_bytes_per_layer_list": [float(v) for v in a2a_l],
    }


def roofline_evaluator(
    *, expert_flops: float, gpu_flops: float, a2a_bw: float, a2a_latency: float = 0.0
) -> Evaluator:
    """A simple stand-in evaluator (tests, or no cost model): FLOP time + alpha-beta a2a."""

    def evaluate(tokens_per_expert: float, num_local_experts: int, send_bytes: float) -> float:
        comp = tokens_per_expert * num_local_experts * expert_flops / gpu_flops
        return comp + 2.0 * (a2a_latency + send_bytes / a2a_bw)

    return evaluate
