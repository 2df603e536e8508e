"""``moeplan validate --plan``: moeplan's own pick for each question of a measured report,
checked against the configuration the report measured best.

A question is a comparison group of :mod:`moeplan.commands.validate` (the runs of one report
with the same dataset, lengths and prompt count on one node): "which single server runs this
benchmark fastest?", the answer ranked by total-token throughput, as the report ranks its runs.
moeplan answers it over a space of its own, then looks the answer up among the runs:

- **The space.** Every checkpoint, engine and engine release the group's runs used, on every
  GPU count they used, in every parallel layout that engine's launch command can state on that
  many GPUs (:func:`launch_space`: pipeline, tensor, data and expert parallelism as the engine
  spells them; SGLang's plain ``--dp-size`` copies too), with the engine's defaults otherwise,
  plus the group's own runs with their flags. A generated launch whose deployment (checkpoint,
  engine, release, layout, GPUs) a run of the group already has is that run: the run's own
  launch, flags and all, is priced, not the default.
- **The pick.** Each candidate is simulated by ``moeplan bench``: a run on its own prompts (as
  ``validate`` prices it: its dataset draw scaled to its measured means, or its token totals
  for ``random``), a generated launch on the prompts of the group's measured best run (the
  outputs a model of the group emitted before its end-of-sequence token); the pick has the
  highest predicted total-token throughput.
- **The verdict.** ``agrees``: the pick is the measured best run, or a run of the same
  launch command measured again (:func:`moeplan.commands.validate.same_config`); ``disagrees``: the pick is
  another measured run (both measured figures given); ``tie``: the top prediction is shared by
  runs that differ only in flags moeplan does not price, the measured best among them;
  ``unverified``: the pick was not measured — its predicted figure and the measured best's
  measured and predicted figures are given, since only a measurement of the pick can settle it.

Candidates a layout cannot serve (weights past the GPUs' memory, a prompt past the KV pool, a
layout the engine's rules refuse) are counted with their first reason, never picked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moeplan.commands.validate import (
    SCORED,
    bench_inputs,
    comparison_groups,
    measured_figures,
    read_rows,
    same_config,
)
from moeplan.errors import MoeplanError


def launch_space(engine: str, model: str, gpus: int) -> list[str]:
    """Every launch command of one ``engine`` server of ``model`` on ``gpus`` GPUs, one per
    parallel layout its flags can state (the engine's launch grammar,
    :attr:`moeplan.backends.launch_reader.EngineArgs.space`)."""
    from moeplan.backends.launch_grammars import grammars

    g = grammars()
    if engine not in g:
        raise MoeplanError(f"engine ({engine!r}) must be one of {', '.join(sorted(g))}")
    if gpus < 1:
        raise MoeplanError(f"gpus ({gpus}) must be >= 1")
    return g[engine].space(model, gpus)


def deployment_key(engine: str, version: str, model: str, layout: str, gpus: int) -> tuple:
    """What makes two launches the same deployment to the question (module docstring)."""
    return (engine, version, model, layout, gpus)


def candidates(
    members: list[dict[str, str]], by_id: dict[str, dict[str, Any]]
) -> list[tuple[str, str, str, str]]:
    """The generated launches of a group's question: (engine, release, checkpoint, launch)
    for every configuration and GPU count its runs used (module docstring; the runs' own
    deployments are matched after pricing)."""
    configs = sorted({(r["engine"], r["engine_version"], r["model"]) for r in members})
    counts = sorted({int(by_id[r["case_id"]]["gpus"]) for r in members})
    return [
        (engine, version, model, cmd)
        for engine, version, model in configs
        for g in counts
        for cmd in launch_space(engine, model, g)
    ]


def price_launch(
    best: dict[str, str], engine: str, version: str, model: str, cmd: str
) -> dict[str, Any]:
    """A generated launch on the prompts of the group's measured best run ``best``: its
    predicted total-token throughput, layout and GPUs, or the reason it cannot run."""
    from moeplan.commands.bench import bench_answer

    try:
        values, s, p = bench_inputs({**best, "engine": engine, "engine_version": version,
                                     "model": model})  # fmt: skip
        out = bench_answer(values, s, launch=cmd, prompts=p)
    except MoeplanError as e:
        return {"launch": cmd, "ran": False, "reason": str(e)}
    mp = out["moeplan"]
    return {"launch": cmd, "ran": True, "engine": engine, "engine_version": version,
            "model": model, "layout": mp["layout"], "gpus": mp["gpus"],
            "total_tok_s": out["total_token_throughput"],
            "outside_graphs": _flagged(mp["scheduler"].get("cuda_graphs"))}  # fmt: skip


def _flagged(graphs: dict[str, Any] | None) -> bool:
    """Whether a predicted run spent over a tenth of its engine time in decode steps above
    the engine's CUDA-graph capture size (:mod:`moeplan.serve.cuda_graphs`: optimistic)."""
    return bool(graphs and graphs["flagged"])


def verdict(
    group: dict[str, Any],
    members: list[dict[str, str]],
    by_id: dict[str, dict[str, Any]],
    measured: Callable[[dict[str, str]], float | None],
    priced: list[dict[str, Any]],
) -> dict[str, Any]:
    """The question's answer (module docstring): the pick, its figures and the verdict.
    ``members``: the group's runs that ran; ``priced``: its generated launches, priced."""
    measured_keys = {
        deployment_key(r["engine"], r["engine_version"], r["model"], by_id[r["case_id"]]["layout"],
                       int(by_id[r["case_id"]]["gpus"]))
        for r in members
    }  # fmt: skip
    cands: list[dict[str, Any]] = [
        {"case_id": r["case_id"], "launch": r["serve_flags"], "layout": by_id[r["case_id"]]["layout"],
         "gpus": by_id[r["case_id"]]["gpus"], "engine": r["engine"], "model": r["model"],
         "predicted": by_id[r["case_id"]]["predicted"]["total_tok_s"], "measured": measured(r),
         "outside_graphs": by_id[r["case_id"]].get("outside_graphs", False)}
        for r in members
    ]  # fmt: skip
    seen: set[tuple] = set()
    refused: dict[str, int] = {}
    for x in priced:
        if not x["ran"]:
            refused[x["reason"]] = refused.get(x["reason"], 0) + 1
            continue
        key = deployment_key(x["engine"], x["engine_version"], x["model"], x["layout"],
                             int(x["gpus"]))  # fmt: skip
        if key in measured_keys or key in seen:  # measured (its run is priced) or already asked
            continue
        seen.add(key)
        cands.append({"case_id": None, "launch": x["launch"], "layout": x["layout"],
                      "gpus": x["gpus"], "engine": x["engine"], "model": x["model"],
                      "predicted": x["total_tok_s"], "measured": None,
                      "outside_graphs": x["outside_graphs"]})  # fmt: skip
    cands.sort(key=lambda c: -c["predicted"])
    pick, top = cands[0], cands[0]["predicted"]
    best_id = group["measured_best"]
    best = next(c for c in cands if c["case_id"] == best_id)
    tied = [c for c in cands if c["predicted"] == top]
    rows = {r["case_id"]: r for r in members}
    if pick["case_id"] is None:
        kind = "unverified"
    elif same_config(rows[pick["case_id"]], rows[best_id]):  # the best, or its repeat
        kind = "agrees"
    elif len(tied) > 1 and any(c["case_id"] == best_id for c in tied):
        kind = "tie"
    else:
        kind = "agrees" if pick["case_id"] == best_id else "disagrees"
    return {
        "doc": group["doc"], "dataset": group["dataset"], "isl": group["isl"],
        "osl": group["osl"], "num_prompts": group["num_prompts"], "half": group["half"],
        "verdict": kind, "candidates": len(cands), "measured_runs": len(members),
        "refused": sum(refused.values()),
        "refused_reasons": sorted(refused.items(), key=lambda kv: -kv[1])[:3],
        "pick": pick, "measured_best": best,
        "pick_over_best_predicted": pick["predicted"] / best["predicted"],
        "ranking": [{k: c[k] for k in ("case_id", "engine", "model", "layout", "gpus",
                                        "predicted", "measured", "outside_graphs")}
                    for c in cands],
    }  # fmt: skip


def layout_kind(layout: str) -> str:
    """What sets a layout apart from the plain TP/EP layouts every report measured: a
    pipeline, attention data parallelism, or neither (``tp/ep``)."""
    if " / PP" in layout:
        return "pipeline"
    return "tp/ep" if "xDP1 " in layout else "attention DP"


def plan_text(plan: list[dict[str, Any]]) -> list[str]:
    """The text section of ``validate --plan``: a count per half and a line per question."""
    from moeplan.commands.validate import group_name

    lines = ["", "== moeplan's pick for each question (validate --plan) =="]
    for half in ("dev", "test"):
        qs = [q for q in plan if q["half"] == half]
        counts = {k: sum(q["verdict"] == k for q in qs)
                  for k in ("agrees", "tie", "disagrees", "unverified")}  # fmt: skip
        lines.append(
            f"{half}: {len(qs)} questions: " + ", ".join(f"{k} {v}" for k, v in counts.items())
        )
        kinds: dict[str, int] = {}
        for q in qs:
            if q["verdict"] == "unverified":
                k = layout_kind(q["pick"]["layout"])
                kinds[k] = kinds.get(k, 0) + 1
        if kinds:
            lines.append("  unverified picks by layout: "
                         + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))  # fmt: skip
        outside = sum(q["pick"]["outside_graphs"] for q in qs)
        lines.append(f"  picks run outside CUDA graphs (priced optimistic): {outside}")
        for q in qs:
            p, b = q["pick"], q["measured_best"]
            head = f"  {q['doc']} {group_name(q)}: {q['verdict']}, {q['candidates']} candidates"
            pick = f"{p['engine']} {p['model']} {p['layout']} on {p['gpus']} GPU(s)"
            fig = f"predicted {p['predicted']:,.0f} tok/s"
            if p["outside_graphs"]:
                fig += " (outside CUDA graphs: optimistic)"
            if p["measured"] is not None:
                fig += f", measured {p['measured']:,.0f}"
            best = (f"measured best {b['case_id']} ({b['layout']}): measured "
                    f"{b['measured']:,.0f}, predicted {b['predicted']:,.0f}")  # fmt: skip
            lines.append(f"{head}; pick {pick} ({p['case_id'] or 'not measured'}): {fig}; {best}")
    return lines


def plan_answer(
    path: str | None, out: dict[str, Any], *, limit: int | None = None, jobs: int | None = None
) -> list[dict[str, Any]]:
    """moeplan's pick for every comparison group's question of ``out`` (``validate``'s answer
    for the same ``path`` and ``limit``), its launches priced by ``jobs`` workers."""
    from moeplan.commands.workers import check_jobs, workers
    from moeplan.search.job import fanout

    rows = read_rows(path)[:limit]
    by_id: dict[str, dict[str, Any]] = {}
    for x in out["rows"]:
        by_id[x["case_id"]] = {"ran": x["ran"]}
        if x["ran"]:
            by_id[x["case_id"]].update(layout=x["layout"], gpus=x["gpus"],
                                       predicted={k: x[k]["predicted"] for k in SCORED},
                                       outside_graphs=_flagged(x.get("cuda_graphs")))  # fmt: skip
    groups = {(g["doc"], g["dataset"], g["isl"], g["osl"], g["num_prompts"]): g
              for g in out["groups"]}  # fmt: skip
    asked = []
    for key, _members, ran in comparison_groups(rows, by_id):
        best = next(r for r in ran if r["case_id"] == groups[key]["measured_best"])
        asked.append((key, ran, best, candidates(ran, by_id)))
    thunks = [lambda b=best, c=c: price_launch(b, *c) for _k, _r, best, cs in asked for c in cs]
    with workers(check_jobs(jobs)):
        priced = iter(fanout.fan_out(thunks))
    picks = []
    for key, ran, _best, cs in asked:
        mine = [next(priced) for _ in cs]
        picks.append(
            verdict(groups[key], ran, by_id, lambda r: measured_figures(r)["total_tok_s"], mine)
        )
    return picks
