"""Compare two ``moeplan plan --json`` outputs key by key: every path whose value differs.

Keys that change from run to run without changing the plan are skipped wherever they occur
(:data:`VARIES`: timings, temporary paths, kernel-lookup counts — the set
``bench/bench_plan_speed.py`` skips). Floats are compared exactly: a speed change must leave
every figure bit for bit the same. Exit status 1 when a path differs.

Run: ``python bench/compare_plans.py BEFORE.json AFTER.json [BEFORE2.json AFTER2.json ...]``.
"""

from __future__ import annotations

import json
import sys

VARIES = {"timings_s", "elapsed_s", "pricing", "seconds", "search_ms", "launch", "artifacts"}


def diff(x: object, y: object, path: str = "") -> list[str]:
    """Every path below ``path`` where ``x`` and ``y`` differ (types, keys, lengths, values)."""
    if isinstance(x, dict) and isinstance(y, dict):
        out = []
        for k in sorted((set(x) | set(y)) - VARIES, key=str):
            if k not in x or k not in y:
                out.append(f"{path}/{k}: only in {'after' if k not in x else 'before'}")
            else:
                out += diff(x[k], y[k], f"{path}/{k}")
        return out
    if isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            return [f"{path}: {len(x)} items before, {len(y)} after"]
        return [
            d for i, (a, b) in enumerate(zip(x, y, strict=True)) for d in diff(a, b, f"{path}[{i}]")
        ]
    if type(x) is not type(y) or x != y:
        return [f"{path}: {x!r} before, {y!r} after"]
    return []


def leaves(x: object) -> int:
    """How many values ``x`` holds (those compared)."""
    if isinstance(x, dict):
        return sum(leaves(v) for k, v in x.items() if k not in VARIES)
    if isinstance(x, list):
        return sum(leaves(v) for v in x)
    return 1


def main() -> None:
    files = sys.argv[1:]
    if not files or len(files) % 2:
        raise SystemExit("usage: compare_plans.py BEFORE.json AFTER.json [...pairs]")
    bad = 0
    for before, after in zip(files[::2], files[1::2], strict=True):
        with open(before, encoding="utf-8") as f, open(after, encoding="utf-8") as g:
            x, y = json.load(f), json.load(g)
        d = diff(x, y)
        bad += bool(d)
        print(f"{before} vs {after}: {leaves(x)} values compared, {len(d)} differ")
        for line in d[:20]:
            print("  " + line)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
