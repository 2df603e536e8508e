"""``moeplan bench --search``: the benchmark run on every launch of one engine server on a
node, ranked, so a user learns which launch command to try before renting the hours.

The launches are :func:`moeplan.commands.lab_plan.launch_space`'s: every parallel layout the
engine's launch command states (pipeline, tensor, attention-data and expert parallelism as
its flags spell them; SGLang's plain ``--dp-size`` copies) on each GPU count searched
(``--search-gpus``; default every power of two up to the node's GPUs), with the engine's
defaults otherwise and the user's knob flags (``--kv-dtype``, ``--mem-fraction``, chunk and
running caps, ...) on every one. Each is simulated as ``moeplan bench`` runs it, on the same
prompts and client settings; the ranking is by total-token throughput, the figure the
benchmark prints last. A launch that cannot run (weights past the GPUs, a prompt past the KV
pool, an engine rule) is listed with its reason. One server on one node: a layout across
nodes needs launch flags of its own, which the search does not write.
"""

from __future__ import annotations

from typing import Any

from moeplan.errors import MoeplanError, require
from moeplan.serve.cuda_graphs import OUTSIDE_GRAPHS_FLAG

#: deployment flags the search sets itself (each candidate's launch states them)
SEARCHED = ("plan", "pd", "attn_tp", "attn_dp", "moe_tp", "moe_ep", "pp", "micro_batches",
            "replicas")  # fmt: skip


def parse_gpus(text: str | None, node_gpus: int) -> list[int]:
    """``--search-gpus``: comma-separated GPU counts of one server, each 1..the node's GPUs
    (default: the powers of two up to them)."""
    if text is None:
        out, k = [], 1
        while k <= node_gpus:
            out.append(k)
            k *= 2
        return out
    try:
        counts = sorted({int(x) for x in text.split(",")})
    except ValueError:
        raise MoeplanError(
            f"--search-gpus ({text!r}) must be comma-separated whole numbers"
        ) from None
    for g in counts:
        require(
            1 <= g <= node_gpus,
            f"--search-gpus ({g}) must be in 1..{node_gpus}: the search launches one server "
            "on one node",
        )
    return counts


def search_answer(values: dict[str, Any], s: Any, gpus: str | None, given: Any) -> dict[str, Any]:
    """``moeplan bench --search``'s JSON answer: every launch ranked (module docstring)."""
    from moeplan.commands.bench import bench_answer, prompts_of
    from moeplan.commands.lab_plan import launch_space
    from moeplan.export.plan_export import DEFAULT_MODEL_PATHS
    from moeplan.specs import load_cluster

    for name in SEARCHED:
        require(
            values.get(name) is None,
            f"--{name.replace('_', '-')} ({values.get(name)}) is what --search varies: drop it",
        )
    from moeplan.backends.launch_grammars import grammars

    engine = values["engine"]
    known = sorted(grammars())
    require(engine in known, f"--engine ({engine!r}) must be one of {', '.join(known)}")
    require(bool(values.get("model")), "--model is required with --search")
    require(bool(values.get("cluster")), "--cluster is required with --search")
    cluster = load_cluster(values["cluster"], values.get("nodes"), values.get("racks"))
    counts = parse_gpus(gpus, cluster.gpus_per_node)
    p = prompts_of(s)
    # the launch loads the preset's Hugging Face repo (a preset name is no checkpoint)
    served = DEFAULT_MODEL_PATHS.get(values["model"], values["model"])
    ran, refused = [], []
    for g in counts:
        for cmd in launch_space(engine, served, g):
            try:
                out = bench_answer(dict(values), s, launch=cmd, given=given, prompts=p)
            except MoeplanError as e:
                refused.append({"launch": cmd, "gpus": g, "reason": str(e)})
                continue
            mp = out["moeplan"]
            ran.append({
                "launch": cmd, "layout": mp["layout"], "gpus": mp["gpus"],
                "total_token_throughput": out["total_token_throughput"],
                "total_token_throughput_per_gpu": out["total_token_throughput"] / mp["gpus"],
                "output_throughput": out["output_throughput"], "duration": out["duration"],
                "mean_ttft_ms": out["mean_ttft_ms"], "mean_tpot_ms": out["mean_tpot_ms"],
                "price_sources": mp["price_sources"],
                "cuda_graphs": mp["scheduler"].get("cuda_graphs"),
            })  # fmt: skip
    require(bool(ran), f"no launch of {engine} could run the benchmark: {refused[0]['reason']}"
            if refused else "no launch to search")  # fmt: skip
    ran.sort(key=lambda r: -r["total_token_throughput"])
    return {
        "kind": "simulated finite runs, one per launch, ranked by total-token throughput",
        "model": values["model"],
        "cluster": cluster.name,
        "engine": engine,
        "engine_version": values.get("engine_version"),
        "search_gpus": counts,
        "settings": s.to_dict(),
        "prompts": p.source,
        "ranked": ran,
        "refused": refused,
    }


def search_text(out: dict[str, Any]) -> str:
    """The ranking as a table, best first, and the refused launches' reasons."""
    rows = [
        f"{out['engine']} on {out['cluster']}, {out['model']}: {len(out['ranked'])} launches "
        f"ranked by simulated total-token throughput (prompts {out['prompts']})",
        f"{'#':>3} {'GPUs':>4} {'total tok/s':>12} {'per GPU':>9} {'TTFT ms':>9} {'TPOT ms':>8}  launch",
    ]
    flagged = 0
    for i, r in enumerate(out["ranked"], 1):
        g = r.get("cuda_graphs") or {}
        mark = "*" if g.get("flagged") else " "
        flagged += mark == "*"
        rows.append(
            f"{i:>3} {r['gpus']:>4} {r['total_token_throughput']:>12,.0f}{mark}"
            f"{r['total_token_throughput_per_gpu']:>9,.0f} {r['mean_ttft_ms']:>9,.0f} "
            f"{r['mean_tpot_ms']:>8.1f}  {r['launch']}"
        )
    if flagged:
        rows.append(
            f"* {flagged} launch(es) spend over {OUTSIDE_GRAPHS_FLAG:.0%} of their engine time in "
            "decode steps above the engine's CUDA-graph capture size: priced optimistic "
            "(moeplan.serve.cuda_graphs), so rank them below what their figures say"
        )
    if out["refused"]:
        rows.append(f"refused ({len(out['refused'])}):")
        rows += [f"  {r['launch']}: {r['reason']}" for r in out["refused"]]
    return "\n".join(rows)
