"""Total and activated parameters of every sample config (``tests/data/configs``) against the
figures their publishers state (``published.json`` there; ``tests/test_specs_configs.py``
holds each within 3 % or half its rounding unit, or its ``known_gap``).

    python bench/bench_config_params.py

One row per config: moeplan's counts in billions (the total with the vision tower where the
publisher counts the checkpoint), the published ones and the relative differences.
"""

from __future__ import annotations

import json
from pathlib import Path

from moeplan.specs import load_model

ROOT = Path(__file__).parents[1] / "tests" / "data" / "configs"


def run() -> list[dict]:
    published = json.loads((ROOT / "published.json").read_text(encoding="utf-8"))
    rows = []
    for folder in sorted(k for k in published if not k.startswith("_")):
        pub = published[folder]
        m = load_model(str(ROOT / folder / "config.json"))
        towers = m.params_towers if pub["counts"] == "checkpoint" else 0
        total, active = (m.params_total + towers) / 1e9, m.params_active / 1e9
        rows.append({
            "name": folder, "value": active, "unit": "activated parameters (B)",
            "total_b": total, "published_total_b": pub["total"],
            "published_active_b": pub["active"], "towers_b": m.params_towers / 1e9,
            "total_diff": total / pub["total"] - 1, "active_diff": active / pub["active"] - 1,
        })  # fmt: skip
    return rows


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']}: total {r['total_b']:.2f}B vs {r['published_total_b']} "
              f"({r['total_diff']:+.1%}), active {r['value']:.2f}B vs {r['published_active_b']} "
              f"({r['active_diff']:+.1%})")  # fmt: skip
