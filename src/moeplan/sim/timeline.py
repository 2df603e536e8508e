"""Event-driven timeline of tasks on exclusive resources with precedence edges.

A :class:`TaskGraph` holds tasks; each task runs for a fixed ``duration`` (seconds) on one
exclusive resource (a GPU's compute stream, one direction of a link) and may not start before
all of its predecessors have ended. Two ways to turn a graph into a :class:`Schedule`:

- :func:`simulate` — **fixed order per resource** (the semi-active schedule): every resource
  runs its tasks in a given order, each as early as its predecessors and the previous task on
  the resource allow. Because :meth:`TaskGraph.add` only accepts predecessors that already
  exist, insertion order is a topological order of the precedence edges; with the default
  order (insertion order on every resource) one pass over the tasks computes the schedule,
  O(tasks + edges). An explicit order needs one Kahn topological pass over precedence and
  resource edges first; an order that contradicts the precedence edges is rejected.
- :func:`simulate_list` — **greedy list scheduling** (non-delay): an event heap of task
  completions keyed ``(time, priority, seq)``; whenever a resource is idle it starts the ready
  task with the smallest key — ``(ready time, priority, seq)`` under ``rule="fifo"``,
  ``(priority, ready time, seq)`` under ``rule="priority"``. ``seq`` is the insertion index,
  so ties are broken deterministically (SimPy's convention, STYLE.md practice 8).

Both are pure Python on flat lists (fast for the scalar recurrences involved) and return
numpy arrays. :meth:`Schedule.check` verifies the invariants: no two tasks overlap on a
resource, every task starts after its predecessors end, durations are non-negative.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

#: Relative tolerance of the invariant checks (float sums of many durations).
CHECK_RTOL = 1e-9


class InvariantError(AssertionError):
    """A schedule broke one of the simulator's invariants (a bug, not a user error)."""


class TaskGraph:
    """Tasks on named exclusive resources with precedence edges (a builder).

    Tasks get consecutive ids ``0, 1, ...`` in insertion order. A task may only depend on
    tasks already added, so the graph is acyclic by construction.
    """

    def __init__(self) -> None:
        self.resources: list[str] = []
        self._res_id: dict[str, int] = {}
        self.names: list[str] = []
        self.kinds: list[str] = []
        self.res: list[int] = []
        self.dur: list[float] = []
        self.preds: list[tuple[int, ...]] = []
        self.prio: list[int] = []

    def __len__(self) -> int:
        return len(self.dur)

    def resource(self, name: str) -> int:
        """Id of resource ``name``, added if new."""
        rid = self._res_id.get(name)
        if rid is None:
            rid = self._res_id[name] = len(self.resources)
            self.resources.append(name)
        return rid

    def add(
        self,
        name: str,
        resource: str | int,
        duration: float,
        deps: Iterable[int] = (),
        *,
        priority: int = 0,
        kind: str = "",
    ) -> int:
        """Add a task and return its id.

        Raises ``ValueError`` when ``duration`` is negative or not finite, when ``resource`` is
        an unknown id, or when a dependency is not an existing task id.
        """
        d = float(duration)
        if not (d >= 0.0 and d < float("inf")):
            raise ValueError(f"task {name!r}: duration ({duration}) must be finite and >= 0")
        rid = self.resource(resource) if isinstance(resource, str) else int(resource)
        if not 0 <= rid < len(self.resources):
            raise ValueError(f"task {name!r}: resource id ({resource}) is not a known resource")
        n = len(self.dur)
        pred = tuple(deps)
        for p in pred:
            if not 0 <= p < n:
                raise ValueError(f"task {name!r}: dependency ({p}) must be an existing task id")
        self.names.append(name)
        self.kinds.append(kind)
        self.res.append(rid)
        self.dur.append(d)
        self.preds.append(pred)
        self.prio.append(int(priority))
        return n

    def resource_id(self, resource: str | int) -> int:
        """Id of an existing resource (``KeyError`` if the name is unknown)."""
        return self._res_id[resource] if isinstance(resource, str) else int(resource)

    def tasks_on(self, resource: str | int) -> list[int]:
        """Task ids on ``resource`` in insertion order."""
        rid = self.resource_id(resource)
        return [i for i, r in enumerate(self.res) if r == rid]

    def num_edges(self) -> int:
        return sum(len(p) for p in self.preds)


@dataclass(frozen=True, slots=True)
class Schedule:
    """Start and end time of every task of ``graph`` (seconds), and derived statistics."""

    graph: TaskGraph
    start: np.ndarray
    end: np.ndarray
    mode: str
    makespan: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "makespan", float(self.end.max()) if len(self.end) else 0.0)

    @property
    def busy(self) -> np.ndarray:
        """Busy seconds per resource (index = resource id)."""
        g = self.graph
        return np.bincount(
            np.asarray(g.res, dtype=np.int64), weights=np.asarray(g.dur), minlength=len(g.resources)
        )

    def utilization(self) -> dict[str, float]:
        """Busy fraction of the makespan per resource name."""
        span = self.makespan or 1.0
        return {
            name: float(b) / span for name, b in zip(self.graph.resources, self.busy, strict=True)
        }

    def busy_by_name(self) -> dict[str, float]:
        return {name: float(b) for name, b in zip(self.graph.resources, self.busy, strict=True)}

    def _sorted_by_resource(self) -> np.ndarray:
        res = np.asarray(self.graph.res, dtype=np.int64)
        return np.lexsort((self.end, self.start, res))

    def idle_gaps(self, resource: str | int, min_len: float = 0.0) -> list[tuple[float, float]]:
        """Idle intervals ``(start, end)`` of ``resource`` within ``[0, makespan]``."""
        rid = self.graph.resource_id(resource)
        ids = np.asarray(self.graph.tasks_on(rid), dtype=np.int64)
        if len(ids) == 0:
            return [(0.0, self.makespan)] if self.makespan > min_len else []
        ids = ids[np.lexsort((self.end[ids], self.start[ids]))]
        lo = np.concatenate(([0.0], self.end[ids]))
        hi = np.concatenate((self.start[ids], [self.makespan]))
        keep = hi - lo > max(min_len, CHECK_RTOL * self.makespan)
        return [(float(a), float(b)) for a, b in zip(lo[keep], hi[keep], strict=True)]

    def violations(self, limit: int = 10) -> list[str]:
        """Broken invariants, as readable lines (empty when the schedule is valid)."""
        g = self.graph
        tol = CHECK_RTOL * max(self.makespan, 1e-30)
        out: list[str] = []
        dur = np.asarray(g.dur)
        bad = np.flatnonzero(
            (dur < 0) | ~np.isclose(self.end - self.start, dur, rtol=1e-9, atol=tol)
        )
        out += [
            f"task {g.names[i]}: duration {dur[i]} but ran {self.end[i] - self.start[i]}"
            for i in bad[:limit]
        ]
        order = self._sorted_by_resource()
        res = np.asarray(g.res, dtype=np.int64)[order]
        same = res[1:] == res[:-1]
        overlap = np.flatnonzero(same & (self.start[order[1:]] < self.end[order[:-1]] - tol))
        out += [
            f"overlap on {g.resources[res[k]]}: {g.names[order[k]]} and {g.names[order[k + 1]]}"
            for k in overlap[:limit]
        ]
        counts = np.fromiter((len(p) for p in g.preds), dtype=np.int64, count=len(g.preds))
        succ = np.repeat(np.arange(len(g.preds)), counts)
        pred = np.fromiter(
            (p for ps in g.preds for p in ps), dtype=np.int64, count=int(counts.sum())
        )
        early = np.flatnonzero(self.start[succ] < self.end[pred] - tol)
        out += [
            f"precedence: {g.names[succ[k]]} starts before {g.names[pred[k]]} ends"
            for k in early[:limit]
        ]
        return out

    def check(self) -> Schedule:
        """Raise :class:`InvariantError` if an invariant is broken; return ``self``."""
        bad = self.violations()
        if bad:
            raise InvariantError("; ".join(bad))
        return self


def simulate(graph: TaskGraph, order: Mapping[str | int, Sequence[int]] | None = None) -> Schedule:
    """Semi-active schedule with a fixed task order on every resource (mode a).

    ``order`` maps a resource (name or id) to the full sequence of its task ids; resources not
    in ``order`` keep insertion order. Raises ``ValueError`` if a sequence is not a permutation
    of the resource's tasks or if the orders contradict the precedence edges (deadlock).
    """
    if not order:
        start, end = _pass_insertion_order(graph)
        return Schedule(graph=graph, start=start, end=end, mode="fixed")
    res_prev = _resource_predecessors(graph, order)
    topo = _topological_order(graph, res_prev)
    dur, preds = graph.dur, graph.preds
    t_start = [0.0] * len(dur)
    t_end = [0.0] * len(dur)
    for i in topo:
        rp = res_prev[i]
        s = t_end[rp] if rp >= 0 else 0.0
        for p in preds[i]:
            e = t_end[p]
            if e > s:
                s = e
        t_start[i] = s
        t_end[i] = s + dur[i]
    return Schedule(graph=graph, start=np.asarray(t_start), end=np.asarray(t_end), mode="fixed")


def _pass_insertion_order(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray]:
    # Insertion order is topological for precedence and for the resource chains alike.
    dur, preds, res = graph.dur, graph.preds, graph.res
    free = [0.0] * len(graph.resources)
    start = [0.0] * len(dur)
    end = [0.0] * len(dur)
    for i, r in enumerate(res):
        s = free[r]
        for p in preds[i]:
            e = end[p]
            if e > s:
                s = e
        start[i] = s
        end[i] = free[r] = s + dur[i]
    return np.asarray(start), np.asarray(end)


def _resource_predecessors(graph: TaskGraph, order: Mapping[str | int, Sequence[int]]) -> list[int]:
    res_prev = [-1] * len(graph)
    seen: set[int] = set()
    for key, seq in order.items():
        rid = graph.resource_id(key)
        want = graph.tasks_on(rid)
        if sorted(seq) != want:
            raise ValueError(
                f"order[{graph.resources[rid]}] must be a permutation of the "
                f"{len(want)} tasks on that resource"
            )
        seen.add(rid)
        for a, b in zip(seq[:-1], seq[1:], strict=True):
            res_prev[b] = a
    last = [-1] * len(graph.resources)
    for i, r in enumerate(graph.res):
        if r not in seen:
            res_prev[i] = last[r]
            last[r] = i
    return res_prev


def _topological_order(graph: TaskGraph, res_prev: list[int]) -> list[int]:
    n = len(graph)
    indeg = [len(p) + (rp >= 0) for p, rp in zip(graph.preds, res_prev, strict=True)]
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(graph.preds):
        for p in ps:
            succ[p].append(i)
    for i, rp in enumerate(res_prev):
        if rp >= 0:
            succ[rp].append(i)
    stack = [i for i in range(n - 1, -1, -1) if indeg[i] == 0]
    topo: list[int] = []
    while stack:
        i = stack.pop()
        topo.append(i)
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                stack.append(s)
    if len(topo) != n:
        raise ValueError("order contradicts the precedence edges: the schedule would deadlock")
    return topo


def simulate_list(graph: TaskGraph, rule: str = "fifo") -> Schedule:
    """Greedy (non-delay) list schedule (mode b); see the module docstring for tie-breaks.

    ``rule`` is ``"fifo"`` (ready time, then priority, then insertion index) or
    ``"priority"`` (priority, then ready time, then insertion index); smaller goes first.
    """
    if rule not in ("fifo", "priority"):
        raise ValueError(f"rule ({rule!r}) must be 'fifo' or 'priority'")
    fifo = rule == "fifo"
    n, dur, res, prio = len(graph), graph.dur, graph.res, graph.prio
    indeg = [len(p) for p in graph.preds]
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(graph.preds):
        for p in ps:
            succ[p].append(i)
    ready: list[list[tuple[float, float, int]]] = [[] for _ in graph.resources]
    for i in range(n):
        if indeg[i] == 0:
            ready[res[i]].append((0.0, float(prio[i]), i) if fifo else (float(prio[i]), 0.0, i))
    for q in ready:
        heapq.heapify(q)
    running = [False] * len(graph.resources)
    start = [0.0] * n
    end = [0.0] * n
    events: list[tuple[float, int, int]] = []

    def dispatch(r: int, now: float) -> None:
        if not running[r] and ready[r]:
            i = heapq.heappop(ready[r])[2]
            running[r] = True
            start[i] = now
            end[i] = now + dur[i]
            heapq.heappush(events, (end[i], prio[i], i))

    for r in range(len(graph.resources)):
        dispatch(r, 0.0)
    while events:
        now = events[0][0]
        touched: list[int] = []
        while events and events[0][0] == now:
            i = heapq.heappop(events)[2]
            running[res[i]] = False
            touched.append(res[i])
            for s in succ[i]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    key = (now, float(prio[s]), s) if fifo else (float(prio[s]), now, s)
                    heapq.heappush(ready[res[s]], key)
                    touched.append(res[s])
        for r in sorted(set(touched)):
            dispatch(r, now)
    return Schedule(graph=graph, start=np.asarray(start), end=np.asarray(end), mode=f"list-{rule}")
