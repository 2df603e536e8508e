"""Baseline expert placements Sem-MoE is compared with (paper 002, §4.3 and §4.6).

- ``contiguous``: expert e on device e // (E / C) (SGLang's default), requests round robin;
- ``eplb``: DeepSeek EPLB (:mod:`moeplan.planners.placement.eplb`) on the train hotness, no redundant
  slots unless asked (physical experts = E), global policy;
- ``transition``: inter-layer affinity placement in the spirit of ExFlow / MoETuner: equal
  experts per device, minimising the expert-to-expert transitions between consecutive layers
  that cross devices, T[l][e, e'] = tokens choosing e at layer l-1 and e' at layer l.
  Small instances are solved exactly with CP-SAT (the same 0-1 program MoETuner states);
  larger ones by sweeps of exact per-layer assignments (each layer's placement given its two
  neighbours is an assignment problem) followed by the same load-balancing swap repair as
  Sem-MoE. Departure: MoETuner's ILP also carries a load term; we keep balance as a repair
  step so all methods share it.
"""

from __future__ import annotations

import numpy as np

from moeplan.planners.placement.cocluster import _swap_repair
from moeplan.planners.placement.eplb import rebalance_experts


def contiguous(num_layers: int, num_experts: int, ep: int) -> np.ndarray:
    """y [L, E]: expert e on device e // (E / C)."""
    return np.tile(np.arange(num_experts) // (num_experts // ep), (num_layers, 1))


def eplb_placement(
    hotness: np.ndarray, ep: int, num_nodes: int = 1, num_groups: int = 1, redundant: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """EPLB (global policy unless groups/nodes are given) with ``redundant`` extra slots per
    device: (y [L, E] device of each expert's first copy, replica counts [L, E, C])."""
    num_l, e = hotness.shape
    num_phy = e + redundant * ep
    phy2log, _, _ = rebalance_experts(hotness, num_phy, num_groups, num_nodes, ep)
    dev = np.arange(num_phy) // (num_phy // ep)
    y = np.empty((num_l, e), dtype=np.int64)
    rep = np.zeros((num_l, e, ep))
    for layer in range(num_l):
        y[layer, phy2log[layer][::-1]] = dev[::-1]  # first physical copy wins
        np.add.at(rep[layer], (phy2log[layer], dev), 1.0)
    return y, rep


def transition_counts(experts: np.ndarray, num_experts: int) -> np.ndarray:
    """T [L, E, E] of one chunk: T[l][e, e'] pairs (e at layer l-1, e' at layer l)."""
    e = num_experts
    num_l = experts.shape[1]
    t = np.zeros((num_l, e * e))
    ex = experts.astype(np.int64)
    for layer in range(1, num_l):
        a, b = ex[:, layer - 1], ex[:, layer]
        pair = a[:, :, None] * e + b[:, None, :]
        ok = (a[:, :, None] >= 0) & (b[:, None, :] >= 0)
        t[layer] = np.bincount(pair[ok], minlength=e * e)
    return t.reshape(num_l, e, e)


def transition_objective(t: np.ndarray, y: np.ndarray) -> float:
    """Transitions that stay on one device: sum_l sum T[l][e, e'] [y_{l-1}(e) = y_l(e')]."""
    return float(
        sum(
            (t[layer] * (y[layer - 1][:, None] == y[layer][None, :])).sum()
            for layer in range(1, t.shape[0])
        )
    )


def _layer_affinity(t: np.ndarray, y: np.ndarray, layer: int, ep: int) -> np.ndarray:
    m = np.zeros((t.shape[1], ep))
    if layer > 0:
        m += t[layer].T @ np.eye(ep)[y[layer - 1]]
    if layer + 1 < t.shape[0]:
        m += t[layer + 1] @ np.eye(ep)[y[layer + 1]]
    return m


def transition_sweeps(t: np.ndarray, ep: int, sweeps: int = 3) -> np.ndarray:
    """Coordinate ascent: each layer's exact assignment given its neighbours."""
    from scipy.optimize import linear_sum_assignment  # here: `moeplan` starts without scipy

    num_l, e, _ = t.shape
    per = e // ep
    y = contiguous(num_l, e, ep)
    for _ in range(sweeps):
        for layer in range(num_l):
            m = _layer_affinity(t, y, layer, ep)
            _, col = linear_sum_assignment(-np.repeat(m, per, axis=1))
            y[layer] = col // per
    return y


def transition_exact(t: np.ndarray, ep: int, time_limit_s: float = 10.0) -> np.ndarray:
    """CP-SAT optimum of the transition program (small instances)."""
    from ortools.sat.python import cp_model

    num_l, e, _ = t.shape
    scale = 1000.0 / max(float(t.max()), 1e-12)
    md = cp_model.CpModel()
    a = {
        (l_, x, c): md.new_bool_var(f"a{l_}_{x}_{c}")
        for l_ in range(num_l)
        for x in range(e)
        for c in range(ep)
    }
    for l_ in range(num_l):
        for x in range(e):
            md.add_exactly_one(a[l_, x, c] for c in range(ep))
        for c in range(ep):
            md.add(sum(a[l_, x, c] for x in range(e)) == e // ep)
    md.add(a[0, 0, 0] == 1)  # symmetry: device labels are interchangeable
    terms = []
    for l_ in range(1, num_l):
        for x in range(e):
            for z in range(e):
                w = int(round(t[l_, x, z] * scale))
                if w <= 0:
                    continue
                for c in range(ep):
                    b = md.new_bool_var("")
                    md.add_implication(b, a[l_ - 1, x, c])
                    md.add_implication(b, a[l_, z, c])
                    terms.append(w * b)
    md.maximize(sum(terms))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    solver.solve(md)
    y = np.zeros((num_l, e), dtype=np.int64)
    for (l_, x, c), var in a.items():
        if solver.value(var):
            y[l_, x] = c
    return y


def transition_placement(
    t: np.ndarray, hotness: np.ndarray, ep: int, *, tol: float = 1.05, exact_max_terms: int = 1024
) -> np.ndarray:
    """Balanced inter-layer-affinity placement (exact when small, sweeps otherwise)."""
    num_l, e, _ = t.shape
    if (num_l - 1) * e * e * ep <= exact_max_terms:
        return transition_exact(t, ep)
    y = transition_sweeps(t, ep)
    for layer in range(num_l):
        y[layer] = _swap_repair(
            _layer_affinity(t, y, layer, ep), hotness[layer], y[layer], ep, tol, 400
        )
    return y
