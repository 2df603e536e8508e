"""``moeplan validate [FILE.csv]``: every measured benchmark run of a CSV through ``moeplan
bench``, scored.

A row (the columns of ``moeplan/data/benchmarks/lab_a100_h100_moe.csv``) is one ``vllm bench
serve`` run: ``serve_flags`` is the engine's launch command, ``engine_version`` its release,
``gpu`` the node (``A100`` → ``a100-sxm-8``, ``H100`` → ``h100-sxm-8``), ``dataset`` with
``isl``/``osl``/``num_prompts`` the prompts, ``request_rate`` and ``max_concurrency`` the
client. ``random`` prompts (range ratio 0) carry the run's own token totals
(:func:`random_run_lengths`): ``osl`` is only a cap, since ``vllm bench serve`` sends it as
``max_completion_tokens`` and asks the engine to ignore the end-of-sequence token only under
``--ignore-eos`` (a ``store_true`` flag, ``vllm/benchmarks/serve.py``; the payload's
``ignore_eos`` set by ``_update_payload_common`` in
``vllm/benchmarks/lib/endpoint_request_func.py``, read at the stored ``02cfb534``), which
the lab's benchmark commands do not give, so a request that emits its end-of-sequence token
stops early (gpt-oss: 134 of 200 tokens per request on average); ``sharegpt`` prompts are the first ``num_prompts`` of
the shipped lengths of vLLM's own seed-0 ShareGPT sample (the requests the lab's runs sent,
counted with Llama-3.1's tokenizer) with their lengths scaled to the report's measured means
(``mean_in``/``mean_out``: :func:`moeplan.commands.bench_workload.sharegpt_lengths`), so
the spread of the lengths, and the long requests that end a burst, are simulated. A row moeplan cannot run (an engine it does not
simulate, a layout that cannot hold the weights, a flag it cannot read) is listed with the
one-line reason, never dropped.

Scores, for each half of the frozen split (``split.json`` beside the shipped CSV: reports by
the SHA-256 of their name, fixed before any error was looked at) and for every row:

- per metric (total-token throughput, mean TTFT, mean TPOT, and where a row gives them the
  mean ITL — the mean gap between two tokens of a request, the engine's step time weighted
  by the requests in each step, which the request-weighted TPOT is not — and the
  peak output token throughput: ``peak_out_tok_s``, vLLM's "Peak output token throughput",
  the most output tokens of one second, which a burst's tail and TTFT wave do not set; the
  shipped rows' come from their reports' result blocks, ``bench/lab_peaks.py``) and per group (all, GPU, engine,
  model): the median and the 90th percentile of ``|predicted / measured - 1|`` and the bias
  ``median(predicted / measured) - 1``; and per CUDA-graph regime (``graphs``: the runs
  ``moeplan bench`` flags as spending more than a tenth of their engine time in decode
  steps above the engine's CUDA-graph capture size, whose host work and eager kernels it
  does not price, against the rest: :func:`graphs_group`);
- rank agreement per comparison group (the runs of one report with the same dataset, lengths
  and prompt count, two or more of them run; ShareGPT runs by their prompt count alone, since
  the CSV's ShareGPT lengths are measured means: :func:`comparison_groups`): Spearman's rho
  between predicted and measured total-token throughput, and whether the measured best
  (highest measured total-token throughput) is the predicted best, or the same launch
  measured again (:func:`same_config`; otherwise a tie for the predicted best counts as
  neither);
- with ``--plan``, moeplan's own pick for each group's question over every launch of the
  group's engines, checkpoints and GPU counts, checked against the measured best
  (:mod:`moeplan.commands.lab_plan`).

Measured figures repeated across reports (:func:`repeated_runs`): two runs of different
reports whose every measured figure (:data:`MEASURED_COLUMNS`, at least :data:`REPEAT_MIN`
of them given) is written the same cannot both be measurements; the answer lists them
(``repeated``) and scores them as given, since the CSV cannot say which copy is the
measurement. The lab's GLM-4.5-Air H100 report repeats its A100 report's eight
``random`` runs figure for figure in its "Other Benchmark Cases" blocks; the shipped CSV takes
those H100 runs from the report's Conclusion table instead (their ``length_note`` says so)
and has no repeated run.
"""

from __future__ import annotations

import csv
import io
import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.errors import MoeplanError, require

LAB_CLUSTER = {"A100": "a100-sxm-8", "H100": "h100-sxm-8"}
#: metric: (the CSV's measured column, bench's key)
SCORED = {
    "total_tok_s": ("total_tok_s", "total_token_throughput"),
    "mean_ttft_ms": ("mean_ttft_ms", "mean_ttft_ms"),
    "mean_tpot_ms": ("mean_tpot_ms", "mean_tpot_ms"),
    "mean_itl_ms": ("mean_itl_ms", "mean_itl_ms"),
    "peak_out_tok_s": ("peak_out_tok_s", "max_output_tokens_per_s"),
}
#: scored where a row gives it, not required of a CSV: the lab's CSV has no peak column
#: (the shipped rows take theirs from ``lab_peaks.csv``: :func:`read_rows`), and a run taken
#: from a report's summary table no ITL
OPTIONAL = frozenset({"mean_itl_ms", "peak_out_tok_s"})
#: ``graphs``: whether the predicted run spent more than a tenth of its engine time in decode
#: steps above the engine's CUDA-graph capture size (:mod:`moeplan.serve.cuda_graphs`:
#: priced optimistic), by :func:`graphs_group`
DIMENSIONS = ("all", "gpu", "engine", "model", "graphs")
#: the measured columns compared by :func:`repeated_runs` (what ``vllm bench serve`` prints)
MEASURED_COLUMNS = (
    "duration_s", "req_per_s", "out_tok_s", "total_tok_s", "mean_ttft_ms", "median_ttft_ms",
    "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms",
)  # fmt: skip
#: figures two runs must both give, all written the same, to count as repeated (a run taken
#: from a report's summary table gives two, total TPS and mean TPOT, which can match by chance)
REPEAT_MIN = 4
REQUIRED = (
    "case_id", "doc", "model", "gpu", "engine", "engine_version", "serve_flags", "dataset",
    "num_prompts", "isl", "osl", "mean_in", "mean_out", "request_rate", "max_concurrency",
    *(col for k, (col, _) in SCORED.items() if k not in OPTIONAL),
)  # fmt: skip


def shipped_csv() -> Path:
    return Path(
        str(resources.files("moeplan").joinpath("data", "benchmarks", "lab_a100_h100_moe.csv"))
    )


def read_rows(path: str | None) -> list[dict[str, str]]:
    """The CSV's rows (one line for a missing column or an empty file)."""
    p = Path(path) if path else shipped_csv()
    require(p.is_file(), f"FILE ({p}) must be a readable CSV")
    with p.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
        require(not missing, f"FILE ({p}) lacks the column {missing[0] if missing else ''}")
        rows = list(reader)
    require(bool(rows), f"FILE ({p}) holds no run")
    if path is None:  # the shipped runs' peaks, from their reports' result blocks
        peaks = resources.files("moeplan").joinpath("data", "benchmarks", "lab_peaks.csv")
        with peaks.open(encoding="utf-8", newline="") as f:
            got = {x["case_id"]: x["peak_out_tok_s"] for x in csv.DictReader(f)}
        rows = [{**r, "peak_out_tok_s": got.get(r["case_id"], "")} for r in rows]
    return rows


def read_split() -> dict[str, Any]:
    """The frozen split of the shipped runs (``split.json``)."""
    path = resources.files("moeplan").joinpath("data", "benchmarks", "split.json")
    return json.loads(path.read_text())


def half_of(doc: str, split: dict[str, Any]) -> str:
    """``dev`` or ``test`` for a report of the split, else ``unsplit``."""
    return "dev" if doc in split["dev"] else "test" if doc in split["test"] else "unsplit"


def _int(r: dict[str, str], col: str) -> int:
    try:
        v = float(r[col])
    except ValueError:
        raise MoeplanError(f"row {r['case_id']} {col} ({r[col]!r}) must be a number") from None
    require(
        v == int(v) and v >= 1, f"row {r['case_id']} {col} ({r[col]!r}) must be a whole number >= 1"
    )
    return int(v)


def _float(r: dict[str, str], col: str) -> float:
    try:
        v = float(r[col])
    except ValueError:
        raise MoeplanError(f"row {r['case_id']} {col} ({r[col]!r}) must be a number") from None
    require(math.isfinite(v) and v >= 1, f"row {r['case_id']} {col} ({r[col]!r}) must be >= 1")
    return v


def spread(total: int, n: int) -> np.ndarray:
    """``n`` whole lengths, as even as can be, summing to ``total`` (the first ``total % n``
    one token longer)."""
    base, extra = divmod(total, n)
    return np.full(n, base, dtype=np.int64) + (np.arange(n) < extra)


def random_run_lengths(r: dict[str, str], n: int) -> Any:
    """A ``random`` row's prompts: its measured token totals (``mean_in``/``mean_out`` times
    the prompts, whole tokens) spread evenly over its ``n`` prompts, capped by the nominal
    ``isl``/``osl`` (module docstring: the output cap and the end-of-sequence token). The
    report gives totals only, so every request stands at the run's mean: the spread of the
    lengths that ended early is not known."""
    from moeplan.commands.bench_workload import Prompts

    isl, osl = _int(r, "isl"), _int(r, "osl")
    mean_in, mean_out = _float(r, "mean_in"), _float(r, "mean_out")
    require(
        mean_out <= osl,
        f"row {r['case_id']} mean_out ({r['mean_out']}) must not exceed osl ({osl}): "
        "osl is the requests' output cap",
    )
    tin, tout = round(mean_in * n), round(mean_out * n)
    src = (
        f"random: the run's {tin} input / {tout} output tokens over {n} prompts "
        f"(nominal {isl}/{osl}; outputs end at the end-of-sequence token or the cap)"
    )
    return Prompts(spread(tin, n), spread(tout, n), src)


def bench_inputs(r: dict[str, str]) -> tuple[dict[str, Any], Any, Any]:
    """A row's deployment values, client settings and prompts (one line for a setting
    moeplan cannot express)."""
    from moeplan.commands.bench import DEPLOYMENT_FLAGS, BenchSettings
    from moeplan.commands.bench_workload import sharegpt_lengths

    require(
        r["gpu"] in LAB_CLUSTER,
        f"row {r['case_id']} gpu ({r['gpu']!r}) must be one of {', '.join(LAB_CLUSTER)}",
    )
    n = _int(r, "num_prompts")
    rate = float(r["request_rate"]) if r["request_rate"] else math.inf
    cap = _int(r, "max_concurrency") if r["max_concurrency"].strip() else None
    s = BenchSettings(num_prompts=n, request_rate=rate, max_concurrency=cap)
    if r["dataset"] == "random":
        p = random_run_lengths(r, n)
    elif r["dataset"] == "sharegpt":
        p = sharegpt_lengths(n, 0, (_float(r, "mean_in"), _float(r, "mean_out")))
    else:
        raise MoeplanError(
            f"row {r['case_id']} dataset ({r['dataset']!r}) must be random or sharegpt"
        )
    values: dict[str, Any] = {k: None for k in DEPLOYMENT_FLAGS}
    values.update(
        model=r["model"], cluster=LAB_CLUSTER[r["gpu"]], engine=r["engine"], cost_engine="engine",
        engine_version=r["engine_version"] or None, redundant_experts=0, mtp=0,
        kv_dtype="auto", a2a="auto",
    )  # fmt: skip
    return values, s, p


def run_row(r: dict[str, str]) -> dict[str, Any]:
    """One row through bench: its predicted figures, or the reason it was not run."""
    from moeplan.commands.bench import bench_answer

    try:
        values, s, p = bench_inputs(r)
        out = bench_answer(values, s, launch=r["serve_flags"], prompts=p)
    except MoeplanError as e:
        return {"case_id": r["case_id"], "ran": False, "reason": str(e)}
    pred = {k: out[key] for k, (_, key) in SCORED.items()}
    pred["duration"] = out["duration"]
    return {"case_id": r["case_id"], "ran": True, "predicted": pred,
            "layout": out["moeplan"]["layout"], "gpus": out["moeplan"]["gpus"],
            "prompts": out["moeplan"]["prompts"],
            "price_sources": out["moeplan"]["price_sources"],
            "graphs": out["moeplan"]["scheduler"].get("cuda_graphs")}  # fmt: skip


def measured_figures(r: dict[str, str]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k, (col, _) in SCORED.items():
        try:
            v = float(r.get(col, ""))
        except ValueError:
            v = math.nan
        out[k] = v if math.isfinite(v) and v > 0 else None
    return out


def graphs_group(result: dict[str, Any]) -> str:
    """A simulated row's CUDA-graph regime (:data:`DIMENSIONS`): ``above capture`` (flagged
    by ``moeplan bench``), ``within capture``, or ``not stated`` (an engine or deployment
    whose capture size moeplan does not state)."""
    g = result.get("graphs")
    if not g or g["engine_time_above_share"] is None:
        return "not stated"
    return "above capture" if g["flagged"] else "within capture"


def _summary(ratios: list[float]) -> dict[str, Any]:
    a = np.asarray(ratios, dtype=float)
    err = np.abs(a - 1)
    return {"n": len(a), "median": float(np.median(err)), "p90": float(np.percentile(err, 90)),
            "bias": float(np.median(a) - 1)}  # fmt: skip


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's rho (average ranks for ties); None when a side is constant."""

    def ranks(v: list[float]) -> np.ndarray:
        a = np.asarray(v, dtype=float)
        order = np.argsort(a, kind="stable")
        rk = np.empty(len(a))
        rk[order] = np.arange(len(a), dtype=float)
        for val in np.unique(a):  # ties share their mean rank
            m = a == val
            rk[m] = rk[m].mean()
        return rk

    rx, ry = ranks(x), ranks(y)
    if np.std(rx) == 0 or np.std(ry) == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def score(
    rows: list[dict[str, str]], results: list[dict[str, Any]], split: dict[str, Any]
) -> dict[str, Any]:
    """The tables (per half, metric, dimension, group) and the rank agreement per group."""
    by_id = {x["case_id"]: x for x in results}
    tables: dict[str, Any] = {}
    for half in ("dev", "test", "all"):
        sel = [r for r in rows if by_id[r["case_id"]]["ran"]
               and (half == "all" or half_of(r["doc"], split) == half)]  # fmt: skip
        tables[half] = {}
        for metric in SCORED:
            t: dict[str, dict[str, Any]] = {}
            for dim in DIMENSIONS:
                keys: dict[str, list[float]] = {}
                for r in sel:
                    m = measured_figures(r)[metric]
                    if m is None:
                        continue
                    x = by_id[r["case_id"]]
                    key = "all" if dim == "all" else graphs_group(x) if dim == "graphs" else r[dim]
                    keys.setdefault(key, []).append(x["predicted"][metric] / m)
                t[dim] = {k: _summary(v) for k, v in sorted(keys.items())}
            tables[half][metric] = t
    groups = []
    for key, members, ran in comparison_groups(rows, by_id):
        meas = [measured_figures(r)["total_tok_s"] for r in ran]
        pred = [by_id[r["case_id"]]["predicted"]["total_tok_s"] for r in ran]
        best_m, best_p = int(np.argmax(meas)), int(np.argmax(pred))
        same = best_m == best_p or same_config(ran[best_m], ran[best_p])
        groups.append({
            "doc": key[0], "dataset": key[1], "isl": key[2], "osl": key[3], "num_prompts": key[4],
            "half": half_of(key[0], split), "runs": len(ran), "not_run": len(members) - len(ran),
            "spearman": spearman(pred, meas),  # type: ignore[arg-type]
            # a tie for the predicted best cannot name one: neither same nor different
            "same_best": True if same else None if pred.count(pred[best_p]) > 1 else False,
            "measured_best": ran[best_m]["case_id"], "predicted_best": ran[best_p]["case_id"],
        })  # fmt: skip
    return {"tables": tables, "groups": groups}


def same_config(a: dict[str, str], b: dict[str, str]) -> bool:
    """Whether two runs are one configuration measured twice: the same checkpoint, engine,
    release and launch command (word for word). Either is then "the measured best
    configuration"; which copy measured higher is the run-to-run spread."""
    keys = ("model", "engine", "engine_version")
    return all(a[k] == b[k] for k in keys) and a["serve_flags"].split() == b["serve_flags"].split()


def comparison_groups(
    rows: list[dict[str, str]], by_id: dict[str, dict[str, Any]]
) -> list[tuple[tuple[str, ...], list[dict[str, str]], list[dict[str, str]]]]:
    """(key, every run, the runs simulated with a measured throughput) of each comparison
    group (one report's runs of the same dataset, lengths and prompt count) with two or more
    runs simulated, in the CSV's order. A ``random`` row's ``isl``/``osl`` are the lengths it
    asked for; a ``sharegpt`` row's are the means it measured (the output mean moves with
    where each model stops), so ShareGPT runs of one report are grouped by their prompt count
    alone (the same seeded draw of the dataset) and their key's lengths are empty."""
    seen: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for r in rows:
        asked = (r["isl"], r["osl"]) if r["dataset"] == "random" else ("", "")
        key = (r["doc"], r["dataset"], *asked, r["num_prompts"])
        seen.setdefault(key, []).append(r)
    out = []
    for key, members in seen.items():
        ran = [
            r for r in members if by_id[r["case_id"]]["ran"] and measured_figures(r)["total_tok_s"]
        ]
        if len(ran) >= 2:
            out.append((key, members, ran))
    return out


def repeated_runs(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Runs whose measured figures repeat, as written, those of an earlier run of another
    report (module docstring): ``case_id``, ``same_as`` and the figures compared."""
    first: dict[tuple[str, ...], dict[str, str]] = {}
    out = []
    for r in rows:
        given = tuple(c for c in MEASURED_COLUMNS if r.get(c, "").strip())
        if len(given) < REPEAT_MIN:
            continue
        key = tuple(f"{c}={r[c].strip()}" for c in given)
        seen = first.setdefault(key, r)
        if seen is not r and seen["doc"] != r["doc"]:
            out.append({"case_id": r["case_id"], "same_as": seen["case_id"], "figures": len(given)})
    return out


def validate_answer(
    path: str | None, *, limit: int | None = None, jobs: int | None = None
) -> dict[str, Any]:
    """``moeplan validate``'s JSON answer (``--plan`` adds :mod:`moeplan.commands.lab_plan`'s
    to it)."""
    from moeplan.commands.workers import check_jobs, workers
    from moeplan.search.job import fanout

    require(limit is None or limit >= 1, f"--limit ({limit}) must be >= 1")
    rows = read_rows(path)[:limit]
    n_jobs = check_jobs(jobs)
    split = read_split()
    thunks = [lambda r=r: run_row(r) for r in rows]
    with workers(n_jobs):
        results = fanout.fan_out(thunks)
    by_id = {x["case_id"]: x for x in results}
    out_rows = []
    for r in rows:
        x = by_id[r["case_id"]]
        m = measured_figures(r)
        row = {"case_id": r["case_id"], "doc": r["doc"], "half": half_of(r["doc"], split),
               "gpu": r["gpu"], "engine": r["engine"], "model": r["model"], "ran": x["ran"]}  # fmt: skip
        if x["ran"]:
            row["layout"], row["gpus"], row["prompts"] = x["layout"], x["gpus"], x["prompts"]
            row["price_sources"] = x["price_sources"]  # the predicted run's priced seconds
            row["cuda_graphs"] = x["graphs"]  # the share of its engine time above capture
            for k in SCORED:
                p = x["predicted"][k]
                row[k] = {"predicted": p, "measured": m[k], "ratio": p / m[k] if m[k] else None}
        else:
            row["reason"] = x["reason"]
        out_rows.append(row)
    return {
        "file": str(path or shipped_csv().name),
        "split": {"rule": split["rule"], "dev": split["dev"], "test": split["test"]},
        "runs": len(rows),
        "ran": sum(x["ran"] for x in results),
        **score(rows, results, split),
        "repeated": repeated_runs(rows),
        "rows": out_rows,
    }


def validate_text(out: dict[str, Any]) -> str:
    """The error tables and the rank agreement, per half."""
    lines = [f"{out['ran']} of {out['runs']} runs of {out['file']} simulated with moeplan bench"]
    for half in ("dev", "test"):
        lines.append("")
        lines.append(f"== {half} half ==")
        for metric, t in out["tables"][half].items():
            if not t["all"]:  # no run of this half gives it (an optional column)
                continue
            lines.append(f"{metric}: |pred/meas - 1| median, p90; bias = median(pred/meas) - 1")
            for dim in DIMENSIONS:
                for key, s in t[dim].items():
                    lines.append(f"  {dim:<7}{key:<44}n={s['n']:<4}median {s['median']:6.1%}  "
                                 f"p90 {s['p90']:6.1%}  bias {s['bias']:+6.1%}")  # fmt: skip
        gs = [g for g in out["groups"] if g["half"] == half]
        rhos = [g["spearman"] for g in gs if g["spearman"] is not None]
        same = sum(g["same_best"] is True for g in gs)
        tied = sum(g["same_best"] is None for g in gs)
        med = f"{np.median(rhos):.2f}" if rhos else "n/a"
        lines.append(
            f"rank agreement: {len(gs)} groups, same best in {same}, predicted best tied in "
            f"{tied}, median Spearman {med} over {len(rhos)}"
        )
        for g in gs:
            rho = "n/a" if g["spearman"] is None else f"{g['spearman']:+.2f}"
            lines.append(f"  {g['doc']} {group_name(g)}: "
                         f"{g['runs']} runs, rho {rho}, best {g['measured_best']} "
                         f"{_mark(g['same_best'])} predicted {g['predicted_best']}")  # fmt: skip
    if out["repeated"]:
        lines.append("")
        lines.append(f"measured figures repeated across reports ({len(out['repeated'])}; "
                     "scored as given, check the source):")  # fmt: skip
        lines += [f"  {x['case_id']} = {x['same_as']} ({x['figures']} figures)"
                  for x in out["repeated"]]  # fmt: skip
    missing = [r for r in out["rows"] if not r["ran"]]
    if missing:
        lines.append("")
        lines.append(f"not run ({len(missing)}):")
        lines += [f"  {r['case_id']}: {r['reason']}" for r in missing]
    return "\n".join(lines)


def group_name(g: dict[str, Any]) -> str:
    """A comparison group's dataset, lengths and prompts, e.g. ``random 4000/200 x500`` or
    ``sharegpt x1000`` (the dataset's own lengths)."""
    lengths = f" {g['isl']}/{g['osl']}" if g["isl"] else ""
    return f"{g['dataset']}{lengths} x{g['num_prompts']}"


def _mark(same: bool | None) -> str:
    return "=" if same else "tie, first" if same is None else "!="


def rows_csv(out: dict[str, Any]) -> str:
    """Every row's predicted and measured figures (``--rows-out``)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    cols = [f"{k}_{s}" for k in SCORED for s in ("predicted", "measured", "ratio")]
    w.writerow(["case_id", "doc", "half", "gpu", "engine", "model", "ran", "reason", *cols,
                "engine_time_above_cuda_graphs"])  # fmt: skip
    for r in out["rows"]:
        vals = [r.get(k, {}).get(s) if r["ran"] else "" for k in SCORED
                for s in ("predicted", "measured", "ratio")]  # fmt: skip
        g = r.get("cuda_graphs") or {}
        above = g.get("engine_time_above_share")
        w.writerow([r["case_id"], r["doc"], r["half"], r["gpu"], r["engine"], r["model"],
                    r["ran"], r.get("reason", ""), *vals, "" if above is None else above])  # fmt: skip
    return buf.getvalue()
