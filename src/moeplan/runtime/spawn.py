"""Start a local process group: N spawned processes, free port, one report per rank.

Used by ``moeplan run`` and by the tests. Each process gets ``MASTER_ADDR/PORT``, ``RANK`` and
``WORLD_SIZE``; its function's return value (JSON-able) or its error comes back per rank
through a pipe (JSON bytes, never pickle; no temp folder). A
:class:`~moeplan.errors.MoeplanError` is reported as ``kind="user"``, anything else as
``kind="runtime"`` with one line; a process that dies without reporting is ``kind="died"``;
one still running when the run is given up is stopped and reported as ``kind="hung"``.

Bounded: every wait has a deadline. Once a rank has failed, the others get
``grace_s`` to report; then every live child gets SIGTERM (and SIGCONT, so a SIGSTOPped one
acts on it), after :data:`KILL_GRACE_S` SIGKILL, and is reaped. A SIGTERM/SIGINT to the parent stops the children the same way before the
parent exits; if the parent is SIGKILLed, the kernel kills the children
(``PR_SET_PDEATHSIG``). Children write nothing on stderr (the C++ stack frames of a failed
rendezvous went there) unless ``MOEPLAN_DEBUG=1``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from multiprocessing.connection import wait as mp_wait
from typing import Any

from moeplan.errors import MoeplanError, check_float, check_int, sigterm_raises

MAX_TIMEOUT_S = 3600.0  # --timeout: one collective may wait at most an hour
MAX_WORLD = 1024  # local processes
KILL_GRACE_S = 2.0  # SIGTERM -> SIGKILL
PEER_GRACE_S = 10.0  # default: how long the other ranks get to report after one failed
RUN_GRACE_S = 3.0  # `moeplan run`: peers of a failed rank report within ~2 s
MAX_REPORT_BYTES = 1 << 24
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def check_timeout(timeout_s: Any, field: str = "--timeout") -> float:
    """A collective timeout: finite, positive, at most :data:`MAX_TIMEOUT_S` seconds."""
    return check_float(field, timeout_s, hi=MAX_TIMEOUT_S, positive=True)


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

    timeout_s = check_timeout(timeout_s, "timeout_s")
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


def _die_with_parent() -> None:
    """Linux: the kernel SIGKILLs this process when its parent dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's own cleanup still applies
        pass


def _quiet_stderr() -> None:
    if os.environ.get("MOEPLAN_DEBUG", "") in ("", "0"):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)


def _entry(
    rank: int,
    world: int,
    port: int,
    parent: int,
    conn: Any,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    _die_with_parent()
    if os.getppid() != parent:  # parent died before prctl took effect
        os._exit(1)
    _quiet_stderr()
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # as torchrun
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
    conn.send_bytes(json.dumps(report).encode())
    conn.close()


def _receive(conn: Any) -> tuple[bool, dict[str, Any] | None]:
    """(finished, report): finished once a report or end-of-file has arrived."""
    try:
        if not conn.poll():
            return False, None
        data = conn.recv_bytes(MAX_REPORT_BYTES)
    except (EOFError, OSError):
        return True, None
    try:
        rep = json.loads(data)
    except ValueError:
        return True, None
    return True, rep if isinstance(rep, dict) and "ok" in rep else None


def _stop(procs: list[Any]) -> set[int]:
    """SIGTERM every live child, SIGKILL what is left after KILL_GRACE_S, reap all.

    Returns the ranks that had to be stopped."""
    stopped = {r for r, p in enumerate(procs) if p.pid is not None and p.exitcode is None}
    live = [procs[r] for r in sorted(stopped)]
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGTERM)
            os.kill(p.pid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
    end = time.monotonic() + KILL_GRACE_S
    for p in live:
        p.join(max(end - time.monotonic(), 0.0))
    for p in live:
        if p.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
    for p in live:
        p.join(KILL_GRACE_S)  # SIGKILL is not ignorable: this returns at once
    return stopped


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Block SIGTERM/SIGINT in the block (bounded: at most ~2 x KILL_GRACE_S); then deliver."""
    sigs = {signal.SIGTERM, signal.SIGINT}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _collect(
    procs: list[Any], conns: list[Any], deadline_s: float, grace_s: float
) -> tuple[list[dict[str, Any] | None], float | None]:
    """Reports as they arrive, until all exited, the deadline, or ``grace_s`` after a failure or
    after the last report (a rank that hangs or is stopped on its way out is then stopped)."""
    reports: list[dict[str, Any] | None] = [None] * len(procs)
    done = [False] * len(procs)
    end = time.monotonic() + deadline_s
    failed_at: float | None = None
    reported_at: float | None = None
    while True:
        for r, c in enumerate(conns):
            if not done[r]:
                done[r], reports[r] = _receive(c)
        failed = any(
            d and (rep is None or not rep["ok"]) for d, rep in zip(done, reports, strict=True)
        )
        if failed_at is None and failed:
            failed_at = time.monotonic()
        if reported_at is None and all(done):
            reported_at = time.monotonic()  # every rank answered: exiting is all that is left
        limit = end if failed_at is None else min(end, failed_at + grace_s)
        if reported_at is not None:  # a rank stopped (or hung) after its report is not waited on
            limit = min(limit, reported_at + grace_s)
        now = time.monotonic()
        pending = [r for r, p in enumerate(procs) if p.exitcode is None or not done[r]]
        if not pending or now >= limit:
            return reports, failed_at
        waitables = [procs[r].sentinel for r in pending if procs[r].exitcode is None]
        waitables += [conns[r] for r in pending if not done[r]]
        mp_wait(waitables, timeout=min(limit - now, 1.0))


def spawn_world(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple[Any, ...] = (),
    *,
    deadline_s: float = 120.0,
    grace_s: float = PEER_GRACE_S,
) -> list[dict[str, Any]]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes; one report each."""
    import torch.multiprocessing as mp

    check_int("world_size", world_size, 1, MAX_WORLD)
    check_float("deadline_s", deadline_s, positive=True)
    check_float("grace_s", grace_s, 0.0)
    ctx = mp.get_context("spawn")
    port = free_port()
    procs: list[Any] = []
    conns: list[Any] = []
    reports: list[dict[str, Any] | None] = []
    failed_at: float | None = None
    with sigterm_raises():
        try:
            for r in range(world_size):
                recv, send = ctx.Pipe(duplex=False)
                p = ctx.Process(
                    target=_entry, args=(r, world_size, port, os.getpid(), send, fn, args)
                )
                p.start()
                send.close()  # the child holds the only write end: EOF when it dies
                procs.append(p)
                conns.append(recv)
            reports, failed_at = _collect(procs, conns, deadline_s, grace_s)
        finally:
            with _signals_deferred():  # a second SIGTERM/SIGINT must not cut the cleanup
                stopped = _stop(procs)
            for c in conns:
                c.close()
    why = (
        f"{deadline_s:.0f} s deadline"
        if failed_at is None
        else f"{grace_s:.0f} s after another rank failed"
    )
    return [
        _report(r, rep, p, r in stopped, why)
        for r, (rep, p) in enumerate(zip(reports, procs, strict=True))
    ]


def _report(r: int, rep: dict[str, Any] | None, p: Any, stopped: bool, why: str) -> dict[str, Any]:
    if rep is not None:
        return rep
    if stopped:
        return {
            "ok": False,
            "kind": "hung",
            "error": f"rank {r} gave no report by the {why}; stopped (SIGTERM, SIGKILL)",
        }
    if p.exitcode is not None and p.exitcode < 0:
        return {
            "ok": False,
            "kind": "died",
            "error": f"rank {r} was killed by signal {-p.exitcode} without reporting",
        }
    return {
        "ok": False,
        "kind": "died",
        "error": f"rank {r} exited with code {p.exitcode} without reporting",
    }
