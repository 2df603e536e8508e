"""Worker processes for the independent pieces of a search (:mod:`moeplan.search.job.fanout`).

``--jobs N`` runs a fan-out's thunks in up to ``N`` forked worker processes. A worker starts
as a copy of the planning process (its specs, cost model and caches), runs one thunk and
sends its result back pickled; a worker never forks again (its own fan-outs run serially).
The thunks change no shared state and print nothing, so the results, and so the plan, are
the same for every ``N`` (``tests/test_fanout.py``); only the wall time changes (and the
kernel-lookup count, :func:`forked`). A worker that dies (killed, out of memory) ends the
command with one line, never a hang. Forking is POSIX-only: where ``fork`` is unavailable,
the pieces run one after another.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing as mp
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from moeplan.errors import MoeplanError, require
from moeplan.search.job import fanout

if TYPE_CHECKING:
    from moeplan.cost import CostModel

MAX_JOBS = 256  # this command's own limit: far past any one machine's cores

_THUNKS: Sequence[Callable[[], Any]] = ()
_CARRY: Sequence[CostModel] = ()
_SHARE: tuple[Any, ...] = ()  # the memos thunks' answers come back into (fanout.sharing)
_FORKED_AT: list[Any] = []  # each memo's mark when the workers were forked


def default_jobs() -> int:
    """The CPUs this process may run on (its affinity mask, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


PR_SET_PDEATHSIG = 1  # linux/prctl.h: the signal a process gets when its parent dies


def _die_with(parent: int) -> None:
    """On Linux, have the kernel kill this worker when the planning process ``parent`` dies
    (``prctl(PR_SET_PDEATHSIG, SIGKILL)``): a planning process killed outright (SIGKILL, a
    caller's timeout) runs no ``finally`` that stops its pool, and its workers would go on
    computing a search nobody reads, as orphans. Elsewhere nothing is set."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


def _start(parent: int) -> None:
    """A worker: the default SIGTERM (the pool stops its workers so), no pools of its own,
    and no life past the planning process ``parent``."""
    _die_with(parent)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the planning process
    fanout.install(fanout.serial)


def _call(i: int) -> tuple[Any, list[dict], list[list]]:
    """Thunk ``i``'s result, the kernel lookups it made in each carried cost model and the
    answers it added to each shared memo (:func:`moeplan.search.job.fanout.sharing`)."""
    before = [c.lookup_counts() for c in _CARRY]
    marks = [m.mark() for m in _SHARE]
    out = _THUNKS[i]()
    made = []
    for c, was in zip(_CARRY, before, strict=True):
        now = c.lookup_counts()
        made.append({k: (n - was.get(k, (0,))[0], med, p90) for k, (n, med, p90) in now.items()})
    answers = [m.since(a, f) for m, a, f in zip(_SHARE, marks, _FORKED_AT, strict=True)]
    return out, made, answers


def _pool(jobs: int, thunks: Sequence[Callable[[], Any]], carry: Sequence[CostModel],
          first: int) -> tuple[ProcessPoolExecutor, list, tuple]:  # fmt: skip
    """A pool of up to ``jobs`` forked workers running ``thunks[first:]``: it, their futures
    and the memos their answers come back into."""
    global _THUNKS, _CARRY, _SHARE, _FORKED_AT
    share = fanout.shared()
    _THUNKS, _CARRY, _SHARE, _FORKED_AT = thunks, carry, share, [m.mark() for m in share]
    sys.stdout.flush()  # a worker flushes its copy of a buffer when it exits
    sys.stderr.flush()
    pool = ProcessPoolExecutor(
        min(jobs, len(thunks) - first),
        mp_context=mp.get_context("fork"),
        initializer=_start,
        initargs=(os.getpid(),),
    )
    try:  # a fork context starts every worker at the first submit
        pending = [pool.submit(_call, i) for i in range(first, len(thunks))]
    except BaseException:
        _stop(pool)
        raise
    finally:
        _THUNKS, _CARRY, _SHARE, _FORKED_AT = (), (), (), []
    return pool, pending, share


def _collect(pool: ProcessPoolExecutor, pending: list, carry: Sequence[CostModel],
             share: tuple) -> list[Any]:  # fmt: skip
    """The workers' results in order, their lookups counted and their answers absorbed here;
    the pool stopped on any error (one line for a dead worker)."""
    try:
        done = [f.result() for f in pending]
    except BrokenProcessPool as err:
        _stop(pool)
        raise MoeplanError(
            "a worker process ended without its result (killed, or out of memory?); "
            "--jobs 1 runs every simulation in this process"
        ) from err
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)
    for _, made, answers in done:
        for c, counts in zip(carry, made, strict=True):
            c.add_lookups(counts)
        for m, got in zip(share, answers, strict=True):
            m.absorb(got)
    return [out for out, _, _ in done]


def _can_fork(jobs: int) -> bool:
    return jobs > 1 and "fork" in mp.get_all_start_methods()


def forked(jobs: int, carry: Sequence[CostModel] = ()) -> fanout.FanOut:
    """A :data:`moeplan.search.job.fanout.FanOut` running the first thunk in this process and the
    others in up to ``jobs`` workers (the first may report progress; two CPUs share three
    equal thunks better so than one worker taking two). The kernel lookups a worker makes in
    a ``carry`` model are added to this process's (the pricing section counts them; a
    worker's caches do not come back, so with workers the count can exceed a serial run's;
    the answers a worker adds to a shared memo do come back, :func:`fanout.sharing`)."""

    def run(thunks: Sequence[Callable[[], Any]]) -> list[Any]:
        if not _can_fork(jobs):
            return fanout.serial(thunks)
        pool, pending, share = _pool(jobs, thunks, carry, 1)
        try:
            first = thunks[0]()
        except BaseException:
            _stop(pool)
            raise
        return [first, *_collect(pool, pending, carry, share)]

    return run


class _Started:
    """Thunks running in workers since :func:`started` began them (a
    :func:`moeplan.search.job.fanout.begin` handle)."""

    def __init__(self, jobs: int, thunks: Sequence[Callable[[], Any]],
                 carry: Sequence[CostModel]) -> None:  # fmt: skip
        self.carry = carry
        self.pool, self.pending, self.share = _pool(jobs, thunks, carry, 0)

    def join(self) -> list[Any]:
        return _collect(self.pool, self.pending, self.carry, self.share)

    def cancel(self) -> None:
        _stop(self.pool)


def started(jobs: int, carry: Sequence[CostModel] = ()) -> fanout.Begin:
    """A :data:`moeplan.search.job.fanout.Begin` starting every thunk in up to ``jobs`` workers at
    once (joined later, as :func:`forked` joins its own)."""

    def start(thunks: Sequence[Callable[[], Any]]) -> Any:
        if not thunks or not _can_fork(jobs):
            return fanout.Later(thunks)
        return _Started(jobs, thunks, carry)

    return start


#: Seconds to wait at most for a stopped pool's manager thread: this module's bound, so a stop
#: never hangs; the thread ends within milliseconds once its workers are gone (the fan-out
#: test's cancel takes well under its 5 s limit).
STOP_JOIN_S = 10.0


def _stop(pool: ProcessPoolExecutor) -> None:
    """End ``pool`` now: its queued thunks are dropped and its workers stopped (they ignore
    Ctrl-C, and a thunk can run for minutes). The pool's manager thread is waited for: left
    running, it races Python 3.11's exit handler (``concurrent.futures.process._python_exit``
    wakes it through a pipe the thread may be closing), which then prints a traceback after
    the command's one error line."""
    # the executor keeps no public list (and none once shut down)
    procs = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    if manager is not None:
        manager.join(STOP_JOIN_S)


def check_jobs(jobs: int | None) -> int:
    """``--jobs``: None = :func:`default_jobs`; else 1..MAX_JOBS."""
    if jobs is None:
        return default_jobs()
    require(1 <= jobs <= MAX_JOBS, f"--jobs ({jobs}) must be in 1..{MAX_JOBS}")
    return jobs


@contextmanager
def workers(jobs: int, carry: Sequence[CostModel] = ()) -> Iterator[None]:
    """Fan-outs inside the block use up to ``jobs`` worker processes (:func:`forked`). The
    objects made so far (modules, specs, kernel tables) are moved out of the cyclic garbage
    collector's reach first (:func:`gc.freeze`, which Python's documentation advises before
    forking): neither this process nor a worker scans them again in each full collection."""
    gc.freeze()
    with fanout.using(forked(jobs, carry), jobs, started(jobs, carry)):
        yield
