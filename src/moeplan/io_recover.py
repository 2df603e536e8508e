"""What an interrupted :class:`moeplan.io.OutputSet` left beside its ``--out`` folder.

A set is staged in a hidden folder ``.<name>.XXXXXXXX.tmp`` and swapped in by two renames:
the published folder to ``.<name>.XXXXXXXX.old``, then the stage to ``<name>``. A run killed
(``kill -9``, power loss) before or between them leaves one or both hidden folders; this module
finds them and puts things right before the next run writes:

- a stage nobody holds is removed (a half-written set is never published);
- an ``.old`` folder nobody holds is the previous complete set: it is renamed back to
  ``<name>`` when ``<name>`` is missing (the kill fell between the two renames), else removed.

"Nobody holds": every live writer keeps an exclusive :func:`fcntl.flock` on its stage folder
and on the folder it moves aside, from before the move until it is done; the kernel drops the
lock of a killed process. A folder whose lock cannot be taken belongs to a live run and is
left alone. Only folders owned by this user are touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import stat
from pathlib import Path


def leftover_pattern(name: str) -> re.Pattern[str]:
    """Names of the hidden folders an :class:`~moeplan.io.OutputSet` for ``name`` makes."""
    return re.compile(rf"\.{re.escape(name)}\.[A-Za-z0-9_]{{8}}\.(tmp|old)")


def lock_folder(path: str | os.PathLike[str], *, wait: bool) -> int | None:
    """An open descriptor of folder ``path`` holding its exclusive lock; ``None`` when the
    folder is gone, is not a folder of this user, or (``wait`` false) another process holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise OSError
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        if os.fstat(fd).st_nlink == 0:  # removed while we waited
            raise OSError
    except OSError:
        os.close(fd)
        return None
    return fd


def recover(outdir: Path) -> None:
    """Restore or remove what interrupted runs left beside ``outdir`` (module docstring)."""
    parent = outdir.parent if str(outdir.parent) else Path(".")
    pattern = leftover_pattern(outdir.name)
    try:
        names = sorted(e for e in os.listdir(parent) if pattern.fullmatch(e))
    except OSError:
        return
    olds = []
    for name in names:
        fd = lock_folder(parent / name, wait=False)
        if fd is None:
            continue  # a live run's, or not ours
        if name.endswith(".old"):
            olds.append((os.fstat(fd).st_mtime_ns, name, fd))
            continue
        try:
            shutil.rmtree(parent / name, ignore_errors=True)
        finally:
            os.close(fd)
    for i, (_, name, fd) in enumerate(sorted(olds, reverse=True)):  # newest first
        try:
            if i == 0 and not os.path.lexists(outdir):
                with contextlib.suppress(OSError):  # another run may publish meanwhile
                    os.rename(parent / name, outdir)
                    continue
            shutil.rmtree(parent / name, ignore_errors=True)
        finally:
            os.close(fd)
