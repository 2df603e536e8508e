"""Balanced token-expert co-clustering (Sem-MoE, paper 002, §3.3 and App. B, Algorithm 1).

Problem (the paper's 0-1 program, with the load term as a hard constraint): rows i (tokens, or
requests) with frequency f_i, MoE layers l, activation counts W[l, i, e]. Choose a cluster
(= EP rank) x_i for every row and a device y_l(e) for every expert, with exactly E / C experts
per device per layer and row load sum_{i: x_i = c} f_i <= cap for every c, to maximise the
local activations  sum_l sum_i sum_e W[l, i, e] [x_i = y_l(e)].

The paper solves it by alternating greedy passes (experts by descending hotness into the
best-scoring unsaturated cluster, random swap fine-tuning, then rows likewise). Its two
subproblems are solvable exactly, which is what we do instead (the departure from the paper):

- experts for fixed rows, per layer: an assignment problem. Affinity M[e, c] = sum_{i in c}
  W[l, i, e]; each device is replicated into E / C slots and ``linear_sum_assignment`` finds
  the optimum;
- rows for fixed experts: a transportation problem (gain G[i, c], supplies f_i, capacities
  cap) solved as an LP with HiGHS; a basic optimum splits at most C - 1 rows, which are
  rounded to their largest share and repaired to respect the caps.

Steps are accepted only when they raise the objective, so the alternation climbs to a fixed
point; it is started from the greedy's own answer (which beat starting from the greedy's
initial rows in our runs), hence never ends below the greedy. For tiny instances :func:`exhaustive` enumerates
all feasible row clusterings (experts exact per clustering), which is the global optimum.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from moeplan.errors import require


@dataclass(frozen=True, kw_only=True, slots=True)
class CoClustering:
    """x [V] row cluster, y [L, E] expert device, objective = local activations (counts)."""

    x: np.ndarray
    y: np.ndarray
    objective: float


def _lpt(freq: np.ndarray, ep: int) -> np.ndarray:
    """Longest-processing-time packing: heaviest row into the lightest cluster."""
    x = np.zeros(len(freq), dtype=np.int64)
    load = np.zeros(ep)
    for i in np.argsort(-freq, kind="stable"):
        c = int(np.argmin(load))
        x[i] = c
        load[c] += freq[i]
    return x


def row_cap(freq: np.ndarray, ep: int, slack: float) -> float:
    """Largest row load allowed per cluster: (1 + slack) x mean, raised to the largest load of
    the LPT packing so that a feasible clustering always exists."""
    load = np.bincount(_lpt(freq, ep), weights=freq, minlength=ep)
    return float(max((1.0 + slack) * freq.sum() / ep, load.max(initial=0.0)))


def objective(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """sum_l sum_i W[l, i, e] [x_i == y_l(e)]."""
    return float(
        sum((w[layer] * (x[:, None] == y[layer][None, :])).sum() for layer in range(w.shape[0]))
    )


def gains(w: np.ndarray, y: np.ndarray, ep: int) -> np.ndarray:
    """G[i, c] = activations of row i whose expert sits on device c (summed over layers)."""
    g = np.zeros((w.shape[1], ep))
    for layer in range(w.shape[0]):
        g += w[layer] @ np.eye(ep, dtype=w.dtype)[y[layer]]
    return g


def expert_step(
    w: np.ndarray,
    x: np.ndarray,
    ep: int,
    price: np.ndarray | None = None,
    hot: np.ndarray | None = None,
) -> np.ndarray:
    """Exact expert placement per layer for fixed rows (optionally with device load prices)."""
    from scipy.optimize import linear_sum_assignment  # here: `moeplan` starts without scipy

    num_l, _, e = w.shape
    per = e // ep
    onehot = np.eye(ep, dtype=w.dtype)[x]
    y = np.empty((num_l, e), dtype=np.int64)
    for layer in range(num_l):
        m = w[layer].T @ onehot  # [E, C]
        if price is not None and hot is not None:
            m = m - hot[layer][:, None] * price[layer][None, :]
        _, col = linear_sum_assignment(-np.repeat(m, per, axis=1))
        y[layer] = col // per
    return y


def _repair(x: np.ndarray, g: np.ndarray, freq: np.ndarray, cap: float) -> np.ndarray:
    """Move rows out of over-cap clusters, cheapest loss first, into clusters with room."""
    ep = g.shape[1]
    x = x.copy()
    load = np.bincount(x, weights=freq, minlength=ep)
    for c in np.flatnonzero(load > cap + 1e-9):
        rows = np.flatnonzero(x == c)
        for i in rows[np.argsort(g[rows, c] - g[rows].max(axis=1), kind="stable")]:
            if load[c] <= cap + 1e-9:
                break
            room = np.flatnonzero(load + freq[i] <= cap + 1e-9)
            if len(room) == 0:
                continue
            d = room[np.argmax(g[i, room])]
            x[i], load[c], load[d] = d, load[c] - freq[i], load[d] + freq[i]
    return x


def row_step(g: np.ndarray, freq: np.ndarray, cap: float) -> np.ndarray:
    """Rows for fixed experts: transportation LP (HiGHS), rounded and repaired to the caps."""
    from scipy.optimize import linprog  # here: `moeplan` starts without scipy
    from scipy.sparse import csr_matrix

    v, ep = g.shape
    n = v * ep
    cols = np.arange(n)
    a_eq = csr_matrix((np.ones(n), (np.repeat(np.arange(v), ep), cols)), shape=(v, n))
    a_ub = csr_matrix(
        (
            np.tile(freq, ep),
            (
                np.repeat(np.arange(ep), v),
                (np.arange(v)[None, :] * ep + np.arange(ep)[:, None]).ravel(),
            ),
        ),
        shape=(ep, n),
    )
    res = linprog(
        -g.ravel(),
        A_ub=a_ub,
        b_ub=np.full(ep, cap),
        A_eq=a_eq,
        b_eq=np.ones(v),
        bounds=(0, 1),
        method="highs-ipm",
    )
    if res.status != 0:  # infeasible caps cannot happen with row_cap; keep a safe answer
        return _repair(g.argmax(axis=1), g, freq, cap)
    z = res.x.reshape(v, ep)
    return _repair(z.argmax(axis=1), g, freq, cap)


def initial_rows(w: np.ndarray, freq: np.ndarray, ep: int, cap: float) -> np.ndarray:
    """Rows by descending frequency into their best unsaturated cluster, contiguous experts."""
    e = w.shape[2]
    y0 = np.tile(np.arange(e) // (e // ep), (w.shape[0], 1))
    return _greedy_rows(gains(w, y0, ep), freq, cap)


def _greedy_rows(g: np.ndarray, freq: np.ndarray, cap: float) -> np.ndarray:
    ep = g.shape[1]
    x = np.zeros(g.shape[0], dtype=np.int64)
    load = np.zeros(ep)
    for i in np.argsort(-freq, kind="stable"):
        ok = load + freq[i] <= cap + 1e-9
        score = np.where(ok, g[i], -np.inf) if ok.any() else -load
        c = int(np.argmax(score))
        x[i] = c
        load[c] += freq[i]
    x = _repair(x, g, freq, cap)
    return x if _accepting_feasible(x, freq, ep, cap) else _lpt(freq, ep)


def _accepting_feasible(x: np.ndarray, freq: np.ndarray, ep: int, cap: float) -> bool:
    return bool((np.bincount(x, weights=freq, minlength=ep) <= cap + 1e-9).all())


def alternate(
    w: np.ndarray,
    freq: np.ndarray,
    ep: int,
    x0: np.ndarray,
    cap: float,
    max_iter: int = 20,
    rel_tol: float = 1e-4,
) -> CoClustering:
    """Alternate exact expert and row steps from rows x0 until the objective stops rising."""
    x = x0
    y = expert_step(w, x, ep)
    best = objective(w, x, y)
    for _ in range(max_iter):
        x_new = row_step(gains(w, y, ep), freq, cap)
        if not _accepting_feasible(x_new, freq, ep, cap):
            break
        y_new = expert_step(w, x_new, ep)
        val = objective(w, x_new, y_new)
        if val <= best * (1 + 1e-9) + 1e-12:
            break
        done = val < best * (1 + rel_tol)
        x, y, best = x_new, y_new, val
        if done:
            break
    return CoClustering(x=x, y=y, objective=best)


def greedy(
    w: np.ndarray,
    freq: np.ndarray,
    ep: int,
    cap: float,
    *,
    iters: int = 3,
    swaps: int = 200,
    seed: int = 0,
) -> CoClustering:
    """The paper's Algorithm 1 (as we read it): greedy experts by hotness, swaps, greedy rows."""
    rng = np.random.default_rng(seed)
    num_l, _, e = w.shape
    per = e // ep
    x = initial_rows(w, freq, ep, cap)
    y = np.zeros((num_l, e), dtype=np.int64)
    for _ in range(iters):
        onehot = np.eye(ep)[x]
        for layer in range(num_l):
            m = w[layer].T @ onehot
            hot = w[layer].sum(axis=0)
            load, count = np.zeros(ep), np.zeros(ep, dtype=np.int64)
            for ex in np.argsort(-hot, kind="stable"):
                score = m[ex] / (1.0 + load / max(hot.sum() / ep, 1e-12))
                score = np.where(count < per, score, -np.inf)
                c = int(np.argmax(score))
                y[layer, ex], load[c], count[c] = c, load[c] + hot[ex], count[c] + 1
            for _ in range(swaps):  # fine-tuning: swap two experts of different clusters
                a, b = rng.integers(0, e, size=2)
                ca, cb = y[layer, a], y[layer, b]
                if ca != cb and m[a, cb] + m[b, ca] > m[a, ca] + m[b, cb]:
                    y[layer, a], y[layer, b] = cb, ca
        x = _greedy_rows(gains(w, y, ep), freq, cap)
    return CoClustering(x=x, y=y, objective=objective(w, x, y))


def solve(
    w: np.ndarray,
    freq: np.ndarray,
    ep: int,
    *,
    slack: float = 0.05,
    max_iter: int = 8,
    seed: int = 0,
) -> tuple[CoClustering, CoClustering]:
    """(ours, paper-style greedy) on the same input; ours is never below the greedy."""
    require(w.shape[2] % ep == 0, f"num_experts ({w.shape[2]}) must be divisible by ep ({ep})")
    cap = row_cap(freq, ep, slack)
    base = greedy(w, freq, ep, cap, seed=seed)
    ours = alternate(w, freq, ep, base.x, cap, max_iter)
    if ours.objective < base.objective:  # cannot happen: the expert step is exact
        ours = base
    return ours, base


def exhaustive(
    w: np.ndarray, freq: np.ndarray, ep: int, *, slack: float = 0.05, limit: int = 200_000
) -> CoClustering:
    """Global optimum by enumerating feasible row clusterings (tiny instances only)."""
    v = w.shape[1]
    require(ep**v <= limit, f"exhaustive rows ({ep}^{v}) must be <= {limit}")
    cap = row_cap(freq, ep, slack)
    best: CoClustering | None = None
    for combo in itertools.product(range(ep), repeat=v):
        x = np.array(combo, dtype=np.int64)
        if not _accepting_feasible(x, freq, ep, cap):
            continue
        y = expert_step(w, x, ep)
        val = objective(w, x, y)
        if best is None or val > best.objective + 1e-12:
            best = CoClustering(x=x, y=y, objective=val)
    assert best is not None
    return best


def balance_experts(
    w: np.ndarray,
    x: np.ndarray,
    hot: np.ndarray,
    ep: int,
    *,
    tol: float = 1.05,
    y: np.ndarray | None = None,
    max_swaps: int = 400,
) -> np.ndarray:
    """Expert placement with device load max/mean <= tol where swaps can reach it.

    Starts from the exact placement (or ``y``) and repeatedly swaps an expert of the most
    loaded device with one elsewhere, choosing the swap that loses the least locality per
    unit of load moved, until the layer is within ``tol`` or no swap lowers that device.
    """
    y = expert_step(w, x, ep) if y is None else y.copy()
    onehot = np.eye(ep)[x]
    for layer in range(w.shape[0]):
        m = w[layer].T @ onehot  # [E, C]
        y[layer] = _swap_repair(m, hot[layer], y[layer], ep, tol, max_swaps)
    return y


def _swap_repair(
    m: np.ndarray, h: np.ndarray, yl: np.ndarray, ep: int, tol: float, max_swaps: int
) -> np.ndarray:
    yl = yl.copy()
    mean = h.sum() / ep
    if mean <= 0:
        return yl
    load = np.bincount(yl, weights=h, minlength=ep)
    idx = np.arange(len(h))
    for _ in range(max_swaps):
        top = int(np.argmax(load))
        if load[top] <= tol * mean:
            break
        a = idx[yl == top]
        b = idx[yl != top]
        cb = yl[b]
        delta = h[a][:, None] - h[b][None, :]  # load moved from top to cb
        new_pair_max = np.maximum(load[top] - delta, load[cb][None, :] + delta)
        ok = (delta > 0) & (new_pair_max < load[top] - 1e-12)
        if not ok.any():
            break
        loss = m[a, top][:, None] + m[b, cb][None, :] - m[a][:, cb] - m[b, top][None, :]
        gain = load[top] - new_pair_max
        score = np.where(ok, (loss + 1e-9 * m.max()) / np.maximum(gain, 1e-12), np.inf)
        ia, ib = np.unravel_index(int(np.argmin(score)), score.shape)
        ea, eb, c = a[ia], b[ib], cb[ib]
        yl[ea], yl[eb] = c, top
        load[top] -= delta[ia, ib]
        load[c] += delta[ia, ib]
    return yl


def _imb(h: np.ndarray, yl: np.ndarray, ep: int) -> float:
    load = np.bincount(yl, weights=h, minlength=ep)
    return float(load.max() / max(load.mean(), 1e-12))


def add_replicas(
    w: np.ndarray, x: np.ndarray, y: np.ndarray, ep: int, per_device: int
) -> np.ndarray:
    """Redundant slots: replica counts [L, E, C] = the placement y plus, on every device,
    ``per_device`` replicas of the experts its rows activate most that live elsewhere
    (greedy by affinity; each replica only adds local activations)."""
    num_l, _, e = w.shape
    rep = np.zeros((num_l, e, ep))
    rep[np.arange(num_l)[:, None], np.arange(e)[None, :], y] = 1.0
    if per_device <= 0:
        return rep
    onehot = np.eye(ep, dtype=w.dtype)[x]
    for layer in range(num_l):
        m = (w[layer].T @ onehot).astype(np.float64)  # [E, C]
        m[np.arange(e), y[layer]] = -np.inf  # already local there
        for c in range(ep):
            for ex in np.argsort(-m[:, c], kind="stable")[:per_device]:
                rep[layer, ex, c] += 1.0
    return rep
