"""``moeplan place``'s files and flags beyond the placement itself: SGLang's expert-location
map of the Sem-MoE placement and the flags that go with the file, and the token / request
scheduling tables (:func:`moeplan.planners.placement.planner.place` places).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from moeplan.cost import CostModel
from moeplan.errors import check_int, require
from moeplan.planners.placement.planner import (
    PlaceConfig,
    PlacementResult,
    cost_evaluator,
    physical_to_logical,
    place,
)
from moeplan.specs import ClusterSpec, ModelSpec, load_cluster, load_model
from moeplan.traces.format import iter_trace

MAX_STEP_TOKENS = 1 << 24  # tokens per step; far beyond any engine's batch
MAX_SEED = 2**32 - 1  # numpy's seed range


def sglang_flags(path: Path, ep: int, physical: int, num_experts: int) -> list[str]:
    """The SGLang flags that go with an ``--export-sglang`` file of ``physical`` experts per
    layer: the file (absolute, SGLang reads it relative to its own working folder), the EP size
    it was placed for, and the redundant experts when it replicates any."""
    out = ["--init-expert-location", str(path.resolve()), "--ep-size", str(ep)]
    if physical > num_experts:
        out += ["--ep-num-redundant-experts", str(physical - num_experts)]
    return out


def expert_location(res: PlacementResult) -> np.ndarray:
    """The Sem-MoE placement as SGLang's ``physical_to_logical_map`` [layers, physical]."""
    sem = res.methods["semmoe"]
    return physical_to_logical(sem.y if sem.replicas is None else sem.replicas, res.ep)


def schedule_tables(res: PlacementResult) -> dict[str, Any]:
    """The token / request scheduling tables ``--tables`` writes (arrays by name)."""
    arrays = {
        "token_ids": res.token_ids,
        "device": res.token_conf.argmax(axis=1),
        "confidence": res.token_conf,
        "layer_device": res.layer_device,
        "layer_conf": res.layer_conf,
        "expert_device": res.methods["semmoe"].y,
    }
    if res.markov is not None:
        arrays.update(markov_next=res.markov.next, markov_conf=res.markov.conf)
    return arrays


def place_setup(
    model: str,
    ep: int,
    cluster: str,
    *,
    mode: str,
    baselines: bool,
    seed: int,
    step_tokens: int,
    redundant: int,
) -> tuple[ModelSpec, ClusterSpec, int, PlaceConfig]:
    """The flags checked (one line each): the model, the cluster, the nodes an EP group of
    ``ep`` GPUs spans and the placement's settings."""
    check_int("--step-tokens", step_tokens, 1, MAX_STEP_TOKENS)
    check_int("--seed", seed, 0, MAX_SEED)
    m = load_model(model)
    require(m.num_experts > 1, f"--model ({model}) must be an MoE model")
    require(
        ep >= 1 and m.num_experts % ep == 0,
        f"model.num_experts ({m.num_experts}) must be divisible by ep ({ep})",
    )
    cl = load_cluster(cluster)
    nodes = cl.domains_spanned(ep)
    require(
        ep <= cl.num_gpus * max(1, nodes),
        f"ep ({ep}) must be <= the cluster's GPUs ({cl.num_gpus})",
    )
    cfg = PlaceConfig(
        ep=ep,
        mode=mode,
        baselines=baselines,
        seed=seed,
        step_tokens=step_tokens,
        redundant=redundant,
    )
    return m, cl, nodes, cfg


Call = tuple[float, int, float]


def run_place(
    trace: Path, m: ModelSpec, cm: CostModel, nodes: int, cfg: PlaceConfig
) -> tuple[PlacementResult, list[tuple[Call, float]]]:
    """Sem-MoE's placement of the trace's routing (streamed, read afresh per pass) and the
    baselines, each priced on ``cm``; with every MoE layer it priced, in order (the
    evaluator's arguments and its seconds)."""
    priced = cost_evaluator(cm, m, cfg.ep, nodes)
    calls: list[tuple[Call, float]] = []

    def evaluate(tokens_per_expert: float, num_local_experts: int, send_bytes: float) -> float:
        t = priced(tokens_per_expert, num_local_experts, send_bytes)
        calls.append(((tokens_per_expert, num_local_experts, send_bytes), t))
        return t

    res = place(
        lambda: iter_trace(trace, num_experts=m.num_experts),
        num_layers=m.num_moe_layers,
        num_experts=m.num_experts,
        hidden_bytes=m.hidden_bytes,
        evaluate=evaluate,
        cfg=cfg,
    )
    return res, calls


def place_price_sources(
    m: ModelSpec,
    cm: CostModel,
    nodes: int,
    cfg: PlaceConfig,
    res: PlacementResult,
    calls: list[tuple[Call, float]],
) -> dict[str, dict[str, Any]] | None:
    """``price_sources`` of Sem-MoE's MoE layer time (``moe_layer_time_s``: the mean over
    layers of one MoE layer of ``step_tokens`` tokens on the held-out split): the run of one
    priced layer per MoE layer whose mean is that figure, priced again on each accounting
    copy; ``None`` when no such run was priced."""
    from moeplan.cost.price_sources import analytic, attribute, summarize

    n, want = m.num_moe_layers, res.methods["semmoe"].metrics["moe_layer_time_s"]
    runs = [calls[i : i + n] for i in range(0, len(calls) - n + 1, n)]
    run = next((r for r in runs if float(np.mean([t for _, t in r])) == want), None)
    if run is None:
        return None

    def layer(c: CostModel) -> list[float]:
        ev = cost_evaluator(c, m, cfg.ep, nodes)
        return [float(np.mean([ev(*args) for args, _ in run]))]

    return summarize(attribute(cm, layer), **analytic(cm))


def place_json(
    res: PlacementResult,
    model: str,
    cluster: str,
    trace: str,
    engine: str,
    price: dict[str, Any],
    flags: list[str],
    sources: dict[str, dict[str, Any]] | None,
) -> dict[str, Any]:
    """The ``--json`` object: the placement, what it ran on, the shares of Sem-MoE's priced
    MoE layer time (:func:`place_price_sources`) and the SGLang flags of the
    expert-location file when one was written."""
    out: dict[str, Any] = res.to_dict()
    out.update(
        {
            "model": model,
            "cluster": cluster,
            "trace": trace,
            "engine": engine,
            "pricing": price,
            "price_sources": sources,
        }
    )
    return {**out, "sglang_flags": flags} if flags else out
