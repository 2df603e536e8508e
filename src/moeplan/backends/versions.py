"""Engine versions of the measured kernel tables: parsing, ordering, and which table prices a
requested version.

An engine's kernel tables are measured at a few releases (the ``<version>`` folder of
``<gpu>/<op>/<engine>/<version>/``); ``--engine-version V`` asks for the kernels of release
``V``. This is a different thing from a backend's ``version`` (the release its launch flags
were read from, :attr:`moeplan.backends.base.EngineBackend.version`): the tables say how fast
a release's kernels run, the pinned release says which flags its server accepts.

Versions are PEP 440 style, as the engines tag their releases: ``N(.N)*`` then optionally
``aN`` / ``bN`` / ``rcN``, ``.postN``, ``.devN`` (``0.5.3rc0 < 0.5.3 < 0.5.3.post1 < 0.5.4``;
``1.3.0rc10 < 1.3.0rc20 < 1.3.0``); :func:`version_key` is the one ordering. A malformed
string is one line (:class:`~moeplan.errors.MoeplanError`).

Which table prices ``V`` (:func:`table_for`), per GPU and table file:

- a table at ``V``: ``measured`` (that release's own rows);
- else the newest table older than ``V``: ``nearest version`` (the kernels ``V`` inherits
  unless a release between changed them);
- else (``V`` older than every table of that file): the oldest table, ``extrapolated``.

The error stated beside each non-measured choice is the leave-one-version-out transfer error
measured on H100 (``moeplan/data/version_transfer.json``, ``bench/version_transfer.py``).

A version newer than every table of its engine (on any GPU) is refused: no table was measured
after it, and the transfer error is measured only between tabled releases, so nothing states
how far a later release's kernels moved. The default (no ``--engine-version``) is the newest
table of each kernel. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from moeplan.errors import MoeplanError

#: PEP 440 public versions as engines tag them (no epoch, no local part)
_VERSION = re.compile(
    r"^(?P<release>\d+(?:\.\d+)*)"
    r"(?:(?P<pre>a|b|rc)(?P<pre_n>\d+))?"
    r"(?:\.post(?P<post>\d+))?"
    r"(?:\.dev(?P<dev>\d+))?$"
)
_PRE_RANK = {"dev": 0, "a": 1, "b": 2, "rc": 3, None: 4}

#: how a table prices a requested version (:func:`table_for`)
MEASURED, NEAREST, EXTRAPOLATED = "measured", "nearest version", "extrapolated"


def version_key(version: str) -> tuple:
    """The sort key of ``version`` (module docstring); a malformed string is one line."""
    m = _VERSION.match(version.strip()) if isinstance(version, str) else None
    if m is None:
        raise MoeplanError(
            f"engine version ({version!r}) must be a release like 0.5.9, 0.5.3rc0 or "
            "0.5.4.post2 (PEP 440: N.N[.N][aN|bN|rcN][.postN][.devN])"
        )
    release = [int(p) for p in m["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:  # 0.5 == 0.5.0: trailing zeros do not count
        release.pop()
    if m["pre"] is not None:
        pre = (_PRE_RANK[m["pre"]], int(m["pre_n"]))
    elif m["dev"] is not None and m["post"] is None:
        pre = (_PRE_RANK["dev"], 0)  # 1.0.dev1 < 1.0a1
    else:
        pre = (_PRE_RANK[None], 0)
    post = -1 if m["post"] is None else int(m["post"])
    dev = float("inf") if m["dev"] is None else int(m["dev"])
    return (tuple(release), pre, post, dev)


def sort_versions(versions: Iterable[str]) -> tuple[str, ...]:
    """``versions`` without repeats, oldest first."""
    return tuple(sorted(set(versions), key=version_key))


@dataclass(frozen=True, slots=True)
class TableChoice:
    """The table version that prices a requested engine version, and how (module docstring)."""

    requested: str | None  # None: the newest table (no --engine-version)
    table: str
    how: str  # MEASURED, NEAREST or EXTRAPOLATED


def table_for(measured: Iterable[str], requested: str | None) -> TableChoice:
    """Which of the ``measured`` table versions prices ``requested`` (module docstring);
    ``None`` asks for the newest. ``measured`` must not be empty."""
    have = sort_versions(measured)
    if not have:
        raise MoeplanError("measured (no table versions) must name at least one version")
    if requested is None:
        return TableChoice(None, have[-1], MEASURED)
    key = version_key(requested)
    same = [v for v in have if version_key(v) == key]
    if same:
        return TableChoice(requested, same[0], MEASURED)
    older = [v for v in have if version_key(v) < key]
    if older:
        return TableChoice(requested, older[-1], NEAREST)
    return TableChoice(requested, have[0], EXTRAPOLATED)


def check_version(engine: str, requested: str | None, tabled: Iterable[str]) -> None:
    """Refuse ``requested`` when malformed or newer than every ``tabled`` version of
    ``engine`` (module docstring), one line; ``None`` (the newest tables) always passes."""
    if requested is None:
        return
    key = version_key(requested)
    have = sort_versions(tabled)
    if not have:
        raise MoeplanError(f"--engine-version ({requested!r}): {engine} has no kernel tables")
    if key > version_key(have[-1]):
        raise MoeplanError(
            f"--engine-version ({requested!r}) must not be newer than {engine}'s newest kernel "
            f"table ({have[-1]}): no measured transfer to a later release"
        )
