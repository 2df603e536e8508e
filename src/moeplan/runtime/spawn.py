"""Start a local process group: N spawned processes, free port, results via JSON files.

Used by ``moeplan run`` and by the tests. Each process gets ``MASTER_ADDR/PORT``, ``RANK`` and
``WORLD_SIZE``; its function's return value (JSON-able) or its error comes back per rank. A
:class:`~moeplan.errors.MoeplanError` is reported as ``kind="user"``, anything else as
``kind="runtime"`` with one line; a process that dies without reporting is ``kind="died"``;
one still running at the deadline is terminated and reported as ``kind="hung"``.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from moeplan.errors import MoeplanError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_distributed(
    rank: int, world_size: int, *, timeout_s: float = 60.0, backend: str | None = None
) -> str:
    """``init_process_group`` from env (gloo on CPU, NCCL on CUDA) with a collective timeout."""
    import torch
    import torch.distributed as dist

    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(
        backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s)
    )
    return backend


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text[:400]}"


def _entry(
    rank: int, world: int, port: int, out_dir: str, fn: Callable[..., Any], args: tuple[Any, ...]
) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )
    import torch

    torch.set_num_threads(
        max(1, (os.cpu_count() or 1) // world)
    )  # as torchrun: no oversubscription
    try:
        report = {"ok": True, "result": fn(rank, world, *args)}
    except MoeplanError as err:
        report = {"ok": False, "kind": "user", "error": str(err)}
    except Exception as err:  # a distributed failure: report it as one line
        report = {"ok": False, "kind": "runtime", "error": _one_line(err)}
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    Path(out_dir, f"{rank}.json").write_text(json.dumps(report))


def spawn_world(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple[Any, ...] = (),
    *,
    deadline_s: float = 120.0,
) -> list[dict[str, Any]]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes; one report each."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="moeplan-run-") as out_dir:
        procs = [
            ctx.Process(target=_entry, args=(r, world_size, port, out_dir, fn, args))
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        end = time.monotonic() + deadline_s
        for p in procs:
            p.join(max(end - time.monotonic(), 0.1))
        reports = []
        for r, p in enumerate(procs):
            if p.is_alive():
                p.terminate()
                p.join(5)
                reports.append(
                    {
                        "ok": False,
                        "kind": "hung",
                        "error": f"rank {r} still running after {deadline_s:.0f} s; terminated",
                    }
                )
                continue
            path = Path(out_dir, f"{r}.json")
            reports.append(
                json.loads(path.read_text())
                if path.exists()
                else {
                    "ok": False,
                    "kind": "died",
                    "error": f"rank {r} exited with code {p.exitcode} without reporting",
                }
            )
    return reports
