"""``torchrun --nproc-per-node N -m moeplan.runtime.launch --plan plan.json [options]``.

Reads the plan, validates it against ``WORLD_SIZE`` *before* creating the process group (so a
mismatched plan gives the same one-line error on every rank and exit status 2, never a hang),
then initialises gloo (CPU) or NCCL (CUDA) with a collective timeout and runs the plan. A
distributed failure (a peer that died, a timeout) is one line on stderr and exit status 1.
``--timeout`` is checked (finite, > 0, at most ``MAX_TIMEOUT_S``) and the plan read with the
bounded JSON reader (regular file, size cap, UTF-8) before anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from moeplan.errors import MoeplanError

PLAN_SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)
LINGER_S = 3.0  # after a user error, wait so every rank prints before torchrun tears down


def read_plan(path: str) -> dict[str, Any]:
    """Parse a plan.json file (every failure a one-line :class:`MoeplanError`)."""
    from moeplan.specs.hf_config import read_json_file

    doc = read_json_file(Path(path), "plan")
    if not isinstance(doc, dict):
        raise MoeplanError(f"plan ({path}) must be a JSON object, got {type(doc).__name__}")
    return doc


def validate_plan(path: str, plan: dict[str, Any], world: int, opts: Any) -> None:
    """The runtime's checks of ``plan`` for ``world`` ranks; a tampered field is one line."""
    from moeplan.runtime.mesh import mesh_from_plan
    from moeplan.runtime.runner import prepare

    try:  # pure and fast
        mesh_from_plan(plan, world)
        prepare(plan, world, opts)
        if opts.weights:  # the headers only: every rank would refuse the same file
            from moeplan.runtime.layers.weights import check_safetensors
            from moeplan.runtime.mesh import as_plan
            from moeplan.runtime.options import resolve
            from moeplan.runtime.runner import model_config

            p = as_plan(plan)
            check_safetensors(list(opts.weights), model_config(p, resolve(p, opts)))
    except MoeplanError:
        raise
    except PLAN_SHAPE_ERRORS as err:  # the plan reader assumed a field's type
        text = " ".join(str(err).split())[:200]
        raise MoeplanError(f"plan ({path}) is malformed: {type(err).__name__}: {text}") from None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="moeplan.runtime.launch", description=__doc__.split("\n")[0])
    ap.add_argument("--plan", required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--scale", default="small", choices=["small", "full"])
    ap.add_argument("--tokens", type=int, default=None)
    ap.add_argument("--isl", dest="seq", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--unfused", action="store_true")
    ap.add_argument("--sync-send", action="store_true")
    ap.add_argument("--micro-batches", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--timeline", dest="trace", default=None)
    ap.add_argument("--weights", action="append", default=[])
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    return ap


def options(args: argparse.Namespace) -> Any:
    from moeplan.runtime.runner import RunOptions
    from moeplan.runtime.spawn import check_timeout

    check_timeout(args.timeout)

    return RunOptions(
        model=args.model,
        scale=args.scale,
        tokens=args.tokens,
        seq=args.seq,
        seed=args.seed,
        check=not args.no_check,
        fused=False if args.unfused else None,
        async_send=False if args.sync_send else None,
        micro_batches=args.micro_batches,
        timeout_s=args.timeout,
        trace=args.trace,
        warmup=args.warmup,
        weights=tuple(args.weights),
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    try:
        plan = read_plan(args.plan)
        opts = options(args)
        from moeplan.runtime.runner import run_rank

        validate_plan(args.plan, plan, world, opts)  # every rank, before any collective
        from moeplan.runtime.spawn import init_distributed

        init_distributed(rank, world, timeout_s=opts.timeout_s)
        report = run_rank(rank, world, plan, opts)
    except MoeplanError as err:
        print(f"moeplan: error: {err}", file=sys.stderr, flush=True)
        if world > 1:  # torchrun stops the peers at the first exit: let them report too
            time.sleep(LINGER_S)
        return 2
    except Exception as err:  # distributed failure: one line, not a traceback
        text = " ".join(str(err).split())[:400]
        print(f"moeplan: error: rank {rank}: {type(err).__name__}: {text}", file=sys.stderr)
        return 1
    print(
        json.dumps(report)
        if args.json
        else f"rank {rank} ({report['role']}): {report['wall_s'] * 1e3:.1f} ms, "
        f"max abs err {report['max_abs_err']}"
    )
    import torch.distributed as dist

    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
