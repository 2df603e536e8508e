"""``moeplan plan`` end to end (target <= 5 s; aiconfigurator takes 6.5-30 s).

Reference (same run): ``moeplan models`` as a subprocess, i.e. the CLI's start-up floor, so
the ratio is how many CLI start-ups the whole planning job costs.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

CASES = [
    ("qwen3-235b-a22b", "smidt-a40", []),
    ("deepseek-v2", "findep-a", ["--layers", "8"]),
    ("deepseek-v3", "h200-sxm-8", []),
]


def _time(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "moeplan", *args], check=True, capture_output=True)
    return time.perf_counter() - t0


def run() -> list[dict]:
    ref = min(_time(["models", "--json"]) for _ in range(2))
    rows = []
    for model, cluster, extra in CASES:
        with tempfile.TemporaryDirectory() as out:
            dt = min(
                _time(
                    [
                        "plan",
                        "--model",
                        model,
                        "--cluster",
                        cluster,
                        *extra,
                        "--out",
                        out,
                        "--quiet",
                        "--json",
                    ]
                )
                for _ in range(2)
            )
        rows.append(
            {
                "name": f"moeplan plan {model} on {cluster} {' '.join(extra)}".strip(),
                "value": dt,
                "unit": "s",
                "reference": ref,
                "ratio": dt / ref,
                "target": "<= 5 s",
                "note": "reference = `moeplan models` start-up",
            }
        )
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
