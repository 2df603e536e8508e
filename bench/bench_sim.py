"""Simulator throughput: tasks per second of both modes on a DEP-shaped task graph.

The reference is a trivial Python loop over the same number of tasks (one add and one max per
task) timed in the same run; ``ratio`` = simulator time / baseline time (how many trivial
loop iterations one simulated task costs). Target: >= 200k tasks/s.
"""

from __future__ import annotations

import time

from moeplan.sim import TaskGraph, simulate, simulate_list


def dep_shaped_graph(layers: int, r1: int, r2: int) -> TaskGraph:
    """AG / A2E / EG / E2A pipeline, ``layers * r1 * (2 + 3 * r2)`` tasks."""
    g = TaskGraph()
    back: list[list[int]] = [[] for _ in range(r1)]
    for t in range(layers):
        for i in range(r1):
            a = g.add(f"A{t}.{i}", "AG", 1e-3, back[i], kind="A")
            s = g.add(f"S{t}.{i}", "AG", 4e-4, [a], kind="S")
            back[i] = [s]
            for j in range(r2):
                c = g.add(f"A2E{t}.{i}.{j}", "A2E", 2e-4, [a], kind="A2E")
                e = g.add(f"E{t}.{i}.{j}", "EG", 3e-4, [c], kind="E")
                back[i].append(g.add(f"E2A{t}.{i}.{j}", "E2A", 2e-4, [e], kind="E2A"))
    return g


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _baseline(n: int) -> None:
    d = [1e-3] * n
    x = 0.0
    for i in range(n):
        y = x + d[i]
        if y > x:
            x = y


def run() -> list[dict]:
    g = dep_shaped_graph(layers=60, r1=32, r2=34)  # 60 * 32 * 104 = 199,680 tasks
    n = len(g)
    base = _best(lambda: _baseline(n))
    rows = []
    for label, fn in (
        ("fixed order (semi-active)", lambda: simulate(g)),
        ("greedy list scheduling", lambda: simulate_list(g)),
    ):
        t = _best(fn)
        rows.append(
            {
                "name": f"simulate {label}, {n} tasks",
                "value": n / t,
                "unit": "tasks/s",
                "reference": n / base,
                "ratio": t / base,
                "target": ">= 200k tasks/s",
                "note": "reference = trivial loop iterations/s; ratio = sim time / loop time",
            }
        )
    simulate(g).check()
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
