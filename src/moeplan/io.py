"""File output, done once: atomic single files and atomic sets of files.

- :func:`atomic_path` — a context manager that yields a temp path beside the target and
  renames it into place when the block succeeds (removed on any failure or signal that
  raises, e.g. ``KeyboardInterrupt`` or a ``SystemExit`` from a SIGTERM handler).
- :func:`write_atomic` — text or bytes to a file through :func:`atomic_path`.
- :class:`OutputSet` — several files that belong together (``plan.json``, ``report.html``,
  launch scripts, …) are written into a hidden staging directory next to ``--out`` and swapped
  in as a unit: a reader sees either the old complete set or the new complete set, never a
  mix, and an interrupted run leaves the old set untouched.

Files get normal permissions (``0666 & ~umask``; ``0777 & ~umask`` when executable):
``mkstemp`` alone would leave them ``0600``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from moeplan.errors import MoeplanError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, executable: bool = False) -> Iterator[Path]:
    """Yield a temp path in ``path``'s folder; rename it to ``path`` when the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, (0o777 if executable else 0o666) & ~_umask())
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *,
                 executable: bool = False) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same folder and a rename."""
    with atomic_path(path, executable=executable) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
    return Path(path)


class OutputSet:
    """Files written together into ``outdir`` and published as a unit (module docstring).

    ``known`` names the files this command writes. An existing ``outdir`` may hold only such
    files (an earlier run's set, which is replaced); anything else in it is refused before any
    work, so a swap never deletes a user's file::

        with OutputSet(out, known={"plan.json", "report.html"}) as files:
            files.write("plan.json", text)
    """

    def __init__(self, outdir: str | os.PathLike[str], *, known: set[str]) -> None:
        self.outdir = Path(outdir)
        self.known = set(known)
        self.check()
        self._stage: Path | None = None
        self.written: dict[str, Path] = {}

    def check(self) -> None:
        """Refuse an ``outdir`` that is a file or holds files this command does not write."""
        out = self.outdir
        if out.exists() and not out.is_dir():
            raise MoeplanError(f"--out ({out}) must be a directory, not a file")
        if out.is_dir():
            foreign = sorted(p.name for p in out.iterdir() if p.name not in self.known)
            if foreign:
                shown = ", ".join(foreign[:3]) + (" …" if len(foreign) > 3 else "")
                raise MoeplanError(f"--out ({out}) holds files moeplan did not write ({shown}); "
                                   "choose a new or empty directory")
        parent = out.parent if str(out.parent) else Path(".")
        if parent.exists() and not os.access(parent, os.W_OK):
            raise MoeplanError(f"--out ({out}) must be in a writable directory")

    def __enter__(self) -> OutputSet:
        self.outdir.parent.mkdir(parents=True, exist_ok=True)
        self._stage = Path(tempfile.mkdtemp(dir=self.outdir.parent,
                                            prefix=f".{self.outdir.name}.", suffix=".tmp"))
        return self

    def path(self, name: str) -> Path:
        """Where to write ``name`` now (inside the staging folder)."""
        if name not in self.known:
            raise ValueError(f"OutputSet: {name!r} is not among the declared outputs")
        assert self._stage is not None, "OutputSet.path used outside its with-block"
        self.written[name] = self.outdir / name
        return self._stage / name

    def write(self, name: str, data: str | bytes, *, executable: bool = False) -> Path:
        """Write one member of the set; returns its final path."""
        dst = self.path(name)
        if isinstance(data, bytes):
            dst.write_bytes(data)
        else:
            dst.write_text(data, encoding="utf-8")
        os.chmod(dst, (0o777 if executable else 0o666) & ~_umask())
        return self.outdir / name

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        stage, self._stage = self._stage, None
        assert stage is not None
        if exc_type is not None:
            shutil.rmtree(stage, ignore_errors=True)
            return
        os.chmod(stage, 0o777 & ~_umask())
        old = None
        if self.outdir.exists():
            old = Path(tempfile.mkdtemp(dir=self.outdir.parent, prefix=f".{self.outdir.name}.",
                                        suffix=".old"))
            os.rmdir(old)
            os.replace(self.outdir, old)
        try:
            os.replace(stage, self.outdir)
        except BaseException:
            if old is not None:
                os.replace(old, self.outdir)
            shutil.rmtree(stage, ignore_errors=True)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
