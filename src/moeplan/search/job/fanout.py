"""Independent pieces of a search, run side by side when the caller allows it.

A search step whose pieces do not depend on each other (the replications behind a capacity's
interval, each family's first disaggregated deployment) hands them to :func:`fan_out` as
thunks; the active :data:`FanOut` runs them and returns their results in order. The default
runs them one after another in this process. A caller at the edge (the CLI) installs one
that runs them in worker processes (:func:`using`), so this layer stays free of processes
and I/O.

Every thunk must be deterministic and return its result instead of changing shared state:
run in another process, its side effects are lost. The first thunk may run in the calling
process (a runner's choice); only it may report progress. Results are then the same bit for bit
whichever :data:`FanOut` runs them (``tests/test_fanout.py``).

The one exception to "no shared state" is a memo of pure answers (:func:`sharing`): a runner
that runs thunks elsewhere may bring back the answers they added to it
(:class:`moeplan.search.job.memo_cost.MemoCost`'s ``mark`` / ``since`` / ``absorb``), so that what
a worker priced is not priced again here. An answer is the same wherever it is computed, so
this changes the time a search takes, never its result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")
FanOut = Callable[[Sequence[Callable[[], Any]]], list[Any]]


def serial(thunks: Sequence[Callable[[], T]]) -> list[T]:
    """Run ``thunks`` one after another, in order."""
    return [t() for t in thunks]


class Later:
    """Thunks started by :func:`begin` with no other process to run them: they run here, one
    after another, when joined."""

    def __init__(self, thunks: Sequence[Callable[[], Any]]) -> None:
        self.thunks = thunks

    def join(self) -> list[Any]:
        """Their results, in order."""
        return serial(self.thunks)

    def cancel(self) -> None:
        """Drop them (nothing ran)."""


Begin = Callable[[Sequence[Callable[[], Any]]], Any]  # thunks -> a handle (join, cancel)

_ACTIVE: ContextVar[FanOut] = ContextVar("moeplan_fan_out", default=serial)
_BEGIN: ContextVar[Begin] = ContextVar("moeplan_fan_out_begin", default=Later)
_WIDTH: ContextVar[int] = ContextVar("moeplan_fan_out_width", default=1)
_SHARED: ContextVar[tuple[Any, ...]] = ContextVar("moeplan_fan_out_shared", default=())


def width() -> int:
    """How many thunks the active :data:`FanOut` runs at once (1: one after another). A
    search may look ahead by this many pieces when the extra runs would cost no wall time."""
    return _WIDTH.get()


def fan_out(thunks: Sequence[Callable[[], T]]) -> list[T]:
    """The results of ``thunks``, in order, by the active :data:`FanOut`."""
    if len(thunks) <= 1:
        return serial(thunks)
    return _ACTIVE.get()(thunks)


def begin(thunks: Sequence[Callable[[], Any]]) -> Any:
    """Start ``thunks`` now, elsewhere when the active runner can (none runs in this
    process), and go on: the handle's ``join()`` gives their results in order (the default,
    :class:`Later`, runs them here then), its ``cancel()`` drops them. A caller that starts
    thunks joins or cancels them, on every path."""
    return _BEGIN.get()(thunks)


def install(runner: FanOut, runs_at_once: int = 1) -> None:
    """Make ``runner`` this process's :data:`FanOut` for good, with :class:`Later` for
    :func:`begin` (a worker process installs :func:`serial`: its own fan-outs run in it)."""
    _ACTIVE.set(runner)
    _WIDTH.set(runs_at_once)
    _BEGIN.set(Later)


@contextmanager
def using(runner: FanOut, runs_at_once: int = 1, starter: Begin = Later) -> Iterator[None]:
    """Run :func:`fan_out` calls inside the block with ``runner``, which runs up to
    ``runs_at_once`` thunks at once (:func:`width`), and :func:`begin` calls with
    ``starter``."""
    token, wtoken = _ACTIVE.set(runner), _WIDTH.set(runs_at_once)
    btoken = _BEGIN.set(starter)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        _WIDTH.reset(wtoken)
        _BEGIN.reset(btoken)


def shared() -> tuple[Any, ...]:
    """The memos a runner may bring thunks' answers back into (:func:`sharing`)."""
    return _SHARED.get()


@contextmanager
def sharing(*memos: Any) -> Iterator[None]:
    """Inside the block, thunks run elsewhere may hand the answers they add to ``memos`` back
    to this process (module docstring); each memo has ``mark``, ``since`` and ``absorb``."""
    token = _SHARED.set(_SHARED.get() + tuple(m for m in memos if m not in _SHARED.get()))
    try:
        yield
    finally:
        _SHARED.reset(token)
