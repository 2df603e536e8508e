"""``moeplan run``'s checks before any process starts (ranks and memory this machine holds)
and its answer: the ranks' reports summed up into the ``--json`` object. torch is imported
only inside the functions that need it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from moeplan.errors import MoeplanError, check_int, require, show

MAX_TOKENS = 2**24  # tokens in one global batch of a local run


def check_sizes(tokens: int | None, seq: int | None, micro_batches: int | None) -> None:
    """``--tokens``, ``--isl`` and ``--micro-batches`` within 1..MAX_TOKENS when given (one
    line); an unset ``--tokens`` is chosen from the plan (:func:`moeplan.runtime.options.resolve`)."""
    for flag, v in (("--tokens", tokens), ("--isl", seq), ("--micro-batches", micro_batches)):
        if v is not None:
            check_int(flag, v, 1, MAX_TOKENS)


def check_capacity(doc: dict[str, Any], world: int, opts: Any) -> None:
    """Ranks and memory this machine cannot hold: one line before any process starts."""
    from moeplan.runtime.capacity import check_capacity as check
    from moeplan.runtime.mesh import as_plan
    from moeplan.runtime.options import resolve
    from moeplan.runtime.runner import model_config

    p = as_plan(doc)
    opts = resolve(p, opts)
    check(world, model_config(p, opts), opts.batch_tokens)


def check_gpus(world: int) -> None:
    """NCCL runs one rank per GPU (two ranks on one device fail with "Duplicate GPU detected",
    seen on an H100): say so before starting any process."""
    import torch

    if torch.cuda.is_available() and world > (n := torch.cuda.device_count()):
        raise MoeplanError(
            f"--nproc ({world}) exceeds this machine's CUDA devices ({n}): NCCL runs one rank "
            f"per GPU; run on {world} GPUs, or with CUDA_VISIBLE_DEVICES= on CPU (gloo)"
        )


def run_summary(reports: list[dict[str, Any]], world: int) -> dict[str, Any]:
    """The ranks' reports as one object: success, the largest error against the reference,
    every rank's result, the failures, and rank 0's timelines."""
    failed = [(r, rep) for r, rep in enumerate(reports) if not rep["ok"]]
    ranks = [rep["result"] for rep in reports if rep["ok"]]
    errs = [r["max_abs_err"] for r in ranks if r["max_abs_err"] is not None]
    summary = {
        "world_size": world,
        "ok": not failed,
        "max_abs_err": max(errs) if errs else None,
        "ranks": ranks,
        "failures": [{"rank": r, **rep} for r, rep in failed],
    }
    if ranks and ranks[0]["rank"] == 0:
        summary.update(
            {
                k: v
                for k, v in ranks[0].items()
                if k
                in (
                    "family",
                    "trace",
                    "predicted_trace",
                    "measured_makespan_s",
                    "predicted_makespan_s",
                )
            }
        )
    return summary


def read_run_plan(plan: str, nproc: int | None) -> tuple[str, dict[str, Any], int]:
    """The plan to run (``plan``: a plan.json, or an ``--out`` folder holding one), read with
    the bounded reader and checked against its schema, and the ranks to start (``nproc``, else
    the plan's ``world_size``): its path, its document and the world size."""
    from moeplan.runtime.launch import read_plan
    from moeplan.runtime.mesh import as_plan
    from moeplan.runtime.spawn import MAX_WORLD

    if Path(plan).is_dir() and (Path(plan) / "plan.json").is_file():
        plan = str(Path(plan) / "plan.json")  # an --out folder of plan/dep/strategy/pipeline
    doc = read_plan(plan)
    require(isinstance(doc, dict), f"plan ({plan}) must be a JSON object, got {show(doc)}")
    planned = as_plan(doc).world_size  # the plan's schema checked before any use
    world = nproc if nproc is not None else planned
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise MoeplanError(f"--nproc ({show(world)}) must be a positive integer")
    check_int("--nproc", world, 1, MAX_WORLD)
    return plan, doc, world
