"""The figures of a saved ``moeplan validate --json`` answer that it holds only row by row or
group by group, per half of the split: the runs in it, the errors split by the lab run's
dataset (ShareGPT bursts or random prompts) and the rank agreement's counts.

- ``runs``: the half's rows (simulated or not);
- ``datasets``: per metric and dataset, :func:`moeplan.commands.validate._summary` of the
  predicted / measured ratios (the summary ``moeplan validate`` prints per GPU, engine and
  model: ``n``, the median and 90th percentile of ``|predicted / measured - 1|``, the bias
  ``median(predicted / measured) - 1``). The answer's rows carry no dataset: it is read from
  the CSV that ran (the shipped one unless ``--csv`` names another) by ``case_id``;
- ``gpu_datasets``: the same per metric and (GPU, dataset), keyed ``"H100 sharegpt"``;
- ``ranks``: the comparison groups, those whose measured best is the predicted best, those
  whose predicted best is tied, and the median Spearman rho over the groups that have one
  (what ``moeplan validate`` prints as its rank agreement line).

    python bench/validate_summary.py ANSWER.json [--csv FILE]

prints one JSON document: ``{half: {"runs", "datasets", "gpu_datasets", "ranks"}}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from moeplan.commands.validate import SCORED, _summary, read_rows


def summary(answer: dict, csv_path: str | None = None) -> dict:
    """The per-half figures of ``answer`` (``moeplan validate --json``)."""
    rows = read_rows(csv_path)
    dataset = {r["case_id"]: r["dataset"] for r in rows}
    gpu = {r["case_id"]: r["gpu"] for r in rows}
    out: dict = {}
    for half in ("dev", "test"):
        datasets: dict = {}
        gpu_datasets: dict = {}
        for metric in SCORED:
            ratios: dict[str, list[float]] = {}
            by_gpu: dict[str, list[float]] = {}
            for r in answer["rows"]:
                ratio = r.get(metric, {}).get("ratio") if r["ran"] else None
                if r["half"] == half and ratio is not None:
                    ratios.setdefault(dataset[r["case_id"]], []).append(ratio)
                    key = f"{gpu[r['case_id']]} {dataset[r['case_id']]}"
                    by_gpu.setdefault(key, []).append(ratio)
            datasets[metric] = {k: _summary(v) for k, v in sorted(ratios.items())}
            gpu_datasets[metric] = {k: _summary(v) for k, v in sorted(by_gpu.items())}
        groups = [g for g in answer["groups"] if g["half"] == half]
        rhos = [g["spearman"] for g in groups if g["spearman"] is not None]
        out[half] = {
            "runs": sum(r["half"] == half for r in answer["rows"]),
            "datasets": datasets,
            "gpu_datasets": gpu_datasets,
            "ranks": {
                "groups": len(groups),
                "same_best": sum(g["same_best"] is True for g in groups),
                "predicted_best_tied": sum(g["same_best"] is None for g in groups),
                "median_spearman": statistics.median(rhos) if rhos else None,
                "groups_with_rho": len(rhos),
            },
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("answer", type=Path, help="a saved moeplan validate --json answer")
    ap.add_argument("--csv", help="the CSV it ran (default: the shipped one)")
    a = ap.parse_args()
    answer = json.loads(a.answer.read_text(encoding="utf-8"))
    print(json.dumps(summary(answer, a.csv), indent=1))


if __name__ == "__main__":
    main()
