"""File output, done once: atomic single files and atomic sets of files.

- :func:`atomic_path` — a context manager that yields a temp path beside the target and
  renames it into place when the block succeeds (removed on any failure or signal that
  raises, e.g. ``KeyboardInterrupt`` or a ``SystemExit`` from a SIGTERM handler).
- :func:`write_atomic` — text or bytes to a file through :func:`atomic_path`.
- :class:`OutputSet` — several files that belong together (``plan.json``, ``report.html``,
  launch scripts, …) are written into a hidden staging directory next to ``--out`` and swapped
  in as a unit: a reader sees either the old complete set or the new complete set, never a
  mix, and an interrupted run leaves the old set untouched; the next run restores a set left
  hidden by a kill between the two renames and removes abandoned stages
  (:mod:`moeplan.io_recover`).

A target that exists and is not a regular file (a device such as ``/dev/full``, a FIFO, a
socket, a folder, or a symlink to one of these) is refused before anything is written, and
so is a folder path that is not a folder: renaming over a device node would replace it.
A failure while writing (full disk, read-only folder) is reported on the user's path, not on
the hidden temp file.

Files get normal permissions (``0666 & ~umask``; ``0777 & ~umask`` when executable):
``mkstemp`` alone would leave them ``0600``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from moeplan.errors import MoeplanError, require, show
from moeplan.io_recover import lock_folder, recover

#: Times a set is moved aside and published again when other runs publish in between.
PUBLISH_TRIES = 8


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_target(path: str | os.PathLike[str]) -> Path:
    """Refuse (one line naming ``path``) a target that exists and is not a regular file, or
    whose folder exists and is not a folder; returns ``path``."""
    target = Path(path)
    require(
        "\x00" not in str(target), f"output path ({show(str(target))}) must not contain a NUL byte"
    )
    try:
        st = os.stat(target)  # follows a symlink: what the name leads to
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise MoeplanError(
            f"output path ({target}): a folder on its path is not a folder"
        ) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise MoeplanError(
            f"output path ({target}) exists and is not a regular file "
            f"({_kind(st.st_mode)}); moeplan replaces only regular files"
        )
    parent = target.parent if str(target.parent) else Path(".")
    if os.path.lexists(parent) and not parent.is_dir():
        raise MoeplanError(f"output path ({target}): its folder ({parent}) is not a folder")
    return target


def check_regular_file(path: str | os.PathLike[str], what: str) -> os.stat_result:
    """The stat of ``path`` when it is a regular file (after symlinks); else one line naming
    ``what`` and the path. A FIFO, device or folder is refused before anything opens it (a
    FIFO would block the reader forever)."""
    text = str(path)
    require("\x00" not in text, f"{what} ({show(text)}) must not contain a NUL byte")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise MoeplanError(f"{what} ({path}) does not exist") from None
    except OSError as err:
        raise MoeplanError(f"{what} ({path}) could not be read: {err.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise MoeplanError(f"{what} ({path}) must be a regular file, not {_kind(st.st_mode)}")
    return st


def open_regular(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """``path`` opened for reading when it is a regular file, checked on the open descriptor
    (opened non-blocking, so a FIFO swapped in after a check cannot block); one line else."""
    check_regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as err:
        raise MoeplanError(f"{what} ({path}) could not be read: {err.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise MoeplanError(f"{what} ({path}) must be a regular file, not {_kind(st.st_mode)}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _on_user_path(err: OSError, target: Path, hidden: str | os.PathLike[str]) -> OSError:
    """``err`` reported on ``target`` when it names the hidden temp file (or nothing)."""
    if err.filename is None or str(err.filename).startswith(str(hidden)):
        code = err.errno or errno.EIO
        return OSError(code, err.strerror or os.strerror(code), str(target))
    return err


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, executable: bool = False) -> Iterator[Path]:
    """Yield a temp path in ``path``'s folder; rename it to ``path`` when the block succeeds."""
    target = check_target(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise _on_user_path(err, target, target.parent) from None
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, (0o777 if executable else 0o666) & ~_umask())
        check_target(target)  # still not a device or folder (it may have appeared meanwhile)
        os.replace(tmp, target)
    except OSError as err:
        raise _on_user_path(err, target, tmp) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_atomic(
    path: str | os.PathLike[str], data: str | bytes, *, executable: bool = False
) -> Path:
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
        """Refuse an ``outdir`` that is a file or holds files this command does not write
        (after restoring or removing what an interrupted run left, :mod:`moeplan.io_recover`)."""
        out = self.outdir
        require("\x00" not in str(out), f"--out ({show(str(out))}) must not contain a NUL byte")
        parent = out.parent if str(out.parent) else Path(".")
        if os.path.lexists(parent) and not parent.is_dir():
            raise MoeplanError(f"--out ({out}): its folder ({parent}) is not a folder")
        recover(out)
        if out.exists() and not out.is_dir():
            raise MoeplanError(f"--out ({out}) must be a directory, not a file")
        if out.is_dir():
            foreign = sorted(p.name for p in out.iterdir() if p.name not in self.known)
            if foreign:
                shown = ", ".join(foreign[:3]) + (" …" if len(foreign) > 3 else "")
                raise MoeplanError(
                    f"--out ({out}) holds files moeplan did not write ({shown}); "
                    "choose a new or empty directory"
                )
        if parent.exists() and not os.access(parent, os.W_OK):
            raise MoeplanError(f"--out ({out}) must be in a writable directory")

    def __enter__(self) -> OutputSet:
        try:
            self.outdir.parent.mkdir(parents=True, exist_ok=True)
            while True:  # a stage removed by another run's recovery before we locked it: again
                stage = tempfile.mkdtemp(
                    dir=self.outdir.parent, prefix=f".{self.outdir.name}.", suffix=".tmp"
                )
                lock = lock_folder(stage, wait=True)
                if lock is not None:
                    break
        except OSError as err:
            raise _on_user_path(err, self.outdir, self.outdir.parent) from None
        self._stage, self._lock = Path(stage), lock
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
        try:
            if isinstance(data, bytes):
                dst.write_bytes(data)
            else:
                dst.write_text(data, encoding="utf-8")
            os.chmod(dst, (0o777 if executable else 0o666) & ~_umask())
        except OSError as err:
            raise _on_user_path(err, self.outdir / name, dst) from None
        return self.outdir / name

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        stage, self._stage = self._stage, None
        assert stage is not None
        try:
            if exc_type is not None:
                shutil.rmtree(stage, ignore_errors=True)
                return
            os.chmod(stage, 0o777 & ~_umask())
            self._publish(stage)
        finally:
            os.close(self._lock)

    def _publish(self, stage: Path) -> None:
        """Rename ``stage`` to ``outdir``, moving a published set aside first (and again when
        another run published meanwhile: the last writer wins, nobody fails)."""
        olds: list[tuple[Path, int]] = []
        try:
            for _ in range(PUBLISH_TRIES):
                if os.path.lexists(self.outdir):
                    olds.append(self._move_aside())
                try:
                    os.rename(stage, self.outdir)
                    return
                except OSError as err:
                    if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
            raise OSError(errno.ENOTEMPTY, "other runs keep publishing", str(self.outdir))
        except BaseException:
            if olds and not os.path.lexists(self.outdir):  # put the previous set back
                with contextlib.suppress(OSError):
                    os.rename(olds[-1][0], self.outdir)
            shutil.rmtree(stage, ignore_errors=True)
            raise
        finally:
            for old, fd in olds:
                shutil.rmtree(old, ignore_errors=True)
                os.close(fd)

    def _move_aside(self) -> tuple[Path, int]:
        """Rename the published ``outdir`` to a hidden ``.old`` folder, locked (io_recover)."""
        fd = lock_folder(self.outdir, wait=True)
        if fd is None:
            raise MoeplanError(f"--out ({self.outdir}) must be a folder of this user")
        old = Path(
            tempfile.mkdtemp(dir=self.outdir.parent, prefix=f".{self.outdir.name}.", suffix=".old")
        )
        os.rmdir(old)
        try:
            os.rename(self.outdir, old)
        except BaseException:
            os.close(fd)
            raise
        return old, fd
