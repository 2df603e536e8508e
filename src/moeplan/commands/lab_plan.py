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

from moeplan.commands.validate import same_config
from moeplan.errors import MoeplanError

#: engine: the launch program ``launch_space`` writes (each engine's launch grammar reads it)
PROGRAMS = {
    "vllm": "vllm serve {model}",
    "sglang": "python3 -m sglang.launch_server --model-path {model}",
    "trtllm": "trtllm-serve {model}",
}


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def launch_space(engine: str, model: str, gpus: int) -> list[str]:
    """Every launch command of one ``engine`` server of ``model`` on ``gpus`` GPUs, one per
    parallel layout its flags can state (module docstring). ``P`` pipeline stages (``P``
    divides ``gpus``) of ``W = gpus / P`` GPUs each, and in a stage:

    - vLLM: ``-tp T -dp D`` with ``T x D = W``, with and without ``--enable-expert-parallel``
      (EP over all ``T x D`` ranks; only when more than one);
    - SGLang: ``--tp-size W`` with ``--ep-size E`` (``E`` divides ``W``) and attention DP
      ``--dp-size D --enable-dp-attention`` (``D`` divides ``W``); without a pipeline also
      ``D`` plain copies of ``--tp-size T`` (``--dp-size D``, ``T x D = gpus``);
    - TensorRT-LLM: ``--tp_size W --ep_size E`` (``E`` divides ``W``)."""
    if engine not in PROGRAMS:
        raise MoeplanError(f"engine ({engine!r}) must be one of {', '.join(PROGRAMS)}")
    if gpus < 1:
        raise MoeplanError(f"gpus ({gpus}) must be >= 1")
    head = PROGRAMS[engine].format(model=model)
    out: list[str] = []
    for pp in _divisors(gpus):
        w = gpus // pp
        if engine == "vllm":
            stage = f" -pp {pp}" if pp > 1 else ""
            for tp in _divisors(w):
                dp = w // tp
                base = head + (f" -tp {tp}" if tp > 1 else "") + (f" -dp {dp}" if dp > 1 else "")
                out.append(base + stage)
                if w > 1:
                    out.append(base + stage + " --enable-expert-parallel")
        elif engine == "sglang":
            stage = f" --pp-size {pp}" if pp > 1 else ""
            for ep in _divisors(w):
                for dp in _divisors(w):
                    cmd = head + f" --tp-size {w}" + (f" --ep-size {ep}" if ep > 1 else "")
                    cmd += f" --dp-size {dp} --enable-dp-attention" if dp > 1 else ""
                    out.append(cmd + stage)
        else:
            stage = f" --pp_size {pp}" if pp > 1 else ""
            for ep in _divisors(w):
                out.append(
                    head + f" --tp_size {w}" + (f" --ep_size {ep}" if ep > 1 else "") + stage
                )
    if engine == "sglang":
        for dp in _divisors(gpus)[1:]:  # plain copies: dp servers of tp GPUs each
            tp = gpus // dp
            for ep in _divisors(tp):
                out.append(head + f" --tp-size {tp}" + (f" --ep-size {ep}" if ep > 1 else "")
                           + f" --dp-size {dp}")  # fmt: skip
    return out


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


def price_launch(best: dict[str, str], engine: str, version: str, model: str, cmd: str):  # type: ignore[no-untyped-def]
    """A generated launch on the prompts of the group's measured best run ``best``: its
    predicted total-token throughput, layout and GPUs, or the reason it cannot run."""
    from moeplan.commands.bench import bench_answer
    from moeplan.commands.validate import bench_inputs

    try:
        values, s, p = bench_inputs({**best, "engine": engine, "engine_version": version,
                                     "model": model})  # fmt: skip
        out = bench_answer(values, s, launch=cmd, prompts=p)
    except MoeplanError as e:
        return {"launch": cmd, "ran": False, "reason": str(e)}
    mp = out["moeplan"]
    return {"launch": cmd, "ran": True, "engine": engine, "engine_version": version,
            "model": model, "layout": mp["layout"], "gpus": mp["gpus"],
            "total_tok_s": out["total_token_throughput"]}  # fmt: skip


def verdict(
    group: dict[str, Any],
    members: list[dict[str, str]],
    by_id: dict[str, dict[str, Any]],
    measured: Callable[[dict[str, str]], float | None],
    priced: list[dict[str, Any]],
) -> dict[str, Any]:
    """The question's answer (module docstring): the pick, its figures and the verdict.
    ``members``: the group's runs that ran; ``priced``: its generated launches, priced."""
    runs = {}
    for r in members:
        x = by_id[r["case_id"]]
        key = deployment_key(r["engine"], r["engine_version"], r["model"], x["layout"],
                             int(x["gpus"]))  # fmt: skip
        runs.setdefault(key, []).append(r)
    cands: list[dict[str, Any]] = [
        {"case_id": r["case_id"], "launch": r["serve_flags"], "layout": by_id[r["case_id"]]["layout"],
         "gpus": by_id[r["case_id"]]["gpus"], "engine": r["engine"], "model": r["model"],
         "predicted": by_id[r["case_id"]]["predicted"]["total_tok_s"], "measured": measured(r)}
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
        if key in runs or key in seen:  # measured (its run is priced) or already a candidate
            continue
        seen.add(key)
        cands.append({"case_id": None, "launch": x["launch"], "layout": x["layout"],
                      "gpus": x["gpus"], "engine": x["engine"], "model": x["model"],
                      "predicted": x["total_tok_s"], "measured": None})  # fmt: skip
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
                                        "predicted", "measured")} for c in cands],
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
        for q in qs:
            p, b = q["pick"], q["measured_best"]
            head = f"  {q['doc']} {group_name(q)}: {q['verdict']}, {q['candidates']} candidates"
            pick = f"{p['engine']} {p['model']} {p['layout']} on {p['gpus']} GPU(s)"
            fig = f"predicted {p['predicted']:,.0f} tok/s"
            if p["measured"] is not None:
                fig += f", measured {p['measured']:,.0f}"
            best = (f"measured best {b['case_id']} ({b['layout']}): measured "
                    f"{b['measured']:,.0f}, predicted {b['predicted']:,.0f}")  # fmt: skip
            lines.append(f"{head}; pick {pick} ({p['case_id'] or 'not measured'}): {fig}; {best}")
    return lines
