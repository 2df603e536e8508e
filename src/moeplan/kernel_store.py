"""On-disk store of built kernel-database variants (I/O), split out of :mod:`moeplan.kernel_tables`.

Cold start: building one kernel variant (selection, dedupe, features, the SciPy fit and its
residual field) takes 0.2–1 s, and a planner with an engine touches five or more. Built
variants are therefore kept on disk (and, in a file beside each, the prices it answered,
:mod:`moeplan.cost.kerneldb.price_memo`, written as the console script ends:
:func:`moeplan.kernel_tables.save_memos`) by :class:`DiskStore` under :func:`cache_dir`, one ``.npz``
file per variant (:mod:`moeplan.kernel_codec`: a JSON graph and arrays, read with
``allow_pickle=False``; nothing in the file can run code) named by a content key — SHA-256 of the table file, of every source file of
``moeplan.cost.kerneldb``, of :mod:`moeplan.kernel_tables`, of this module and of the codec, the table GPU's
datasheet device and the Python, NumPy and SciPy versions — so a changed table, model or
library is rebuilt, never served stale. Only regular files owned by the user and writable by no
one else, in a folder owned by the user and writable by no one else, are read: the folder is
opened once and checked on its descriptor, the file opened relative to it with ``O_NOFOLLOW |
O_NONBLOCK`` (a symlink, FIFO or device is never followed, never blocks) and checked on its
descriptor too, so nothing can be swapped between check and read. A member stored compressed
or larger than the file is refused before it is read. Anything that fails a check or does not
decode is a miss: built again and rewritten. A variant's file from an older table or model is removed when its new
one is written. ``MOEPLAN_CACHE_DIR`` moves the folder; ``MOEPLAN_CACHE_DIR=off`` turns the
store off.

Size cap: every change to the modelling code gives every variant a new key, and the files of
the old keys (about 190 MB for the whole test suite) would stay behind. After each write the
folder is therefore trimmed to :func:`cache_max_bytes` (``MOEPLAN_CACHE_MAX_MB`` MiB, default
:data:`CACHE_MAX_MB`): the least recently used ``*.npz`` files (and ``*.pkl`` files of older
moeplan versions, never read) go first, by modification time
(a hit touches its file, so a read counts as a use; ties by name). What remains is the newest
files whose sizes fit. Best effort and safe beside other processes: a file that vanishes or
cannot be removed meanwhile is skipped, never an error; a file being written is a hidden temp
file and is not counted.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import sys
import tempfile
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from moeplan.cost.kerneldb import Device
from moeplan.errors import require
from moeplan.kernel_codec import CodecError, decode, encode
from moeplan.units import MIB

CACHE_ENV = "MOEPLAN_CACHE_DIR"
CACHE_OFF = ("", "0", "off", "none")
CACHE_MAX_ENV = "MOEPLAN_CACHE_MAX_MB"
#: Default size cap of the store, MiB: about five generations of the ~190 MB of variants the
#: whole test suite builds (docs/benchmarks/kerneldb.md), one DeepSeek-V3 run being 23 MB.
CACHE_MAX_MB = 1024
#: Largest cap accepted, MiB (1 PiB: beyond any disk; rejects a mistyped exponent).
MAX_CACHE_MAX_MB = 2**30
#: sources whose change invalidates a stored variant (besides the table file itself)
MODEL_SOURCES = ("cost/kerneldb", "kernel_tables.py", "kernel_store.py", "kernel_codec.py")
SUFFIX = ".npz"  # stored variants; ``.pkl``: an older moeplan's, only ever trimmed
GRAPH = "graph.npy"  # the member holding the JSON graph; arrays are ``a<i>.npy``


def cache_dir() -> Path | None:
    """Where built kernel variants are kept (``None``: not kept)."""
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return None if env.strip().lower() in CACHE_OFF else Path(env) / "kerneldb"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "moeplan" / "kerneldb"


def cache_max_bytes() -> int:
    """The store's size cap in bytes: ``MOEPLAN_CACHE_MAX_MB`` (a whole number of MiB) when
    set, else :data:`CACHE_MAX_MB`; any other value is one :class:`MoeplanError` line."""
    env = os.environ.get(CACHE_MAX_ENV)
    if env is None:
        return CACHE_MAX_MB * MIB
    text = env.strip()
    ok = text.isascii() and text.isdigit() and len(text) <= 12
    require(
        ok and 1 <= int(text) <= MAX_CACHE_MAX_MB,
        f"{CACHE_MAX_ENV} ({env!r}) must be a whole number of MiB in [1, {MAX_CACHE_MAX_MB}]",
    )
    return int(text) * MIB


@cache
def _code_digest() -> str:
    """SHA-256 of the modelling code and the libraries whose objects are stored."""
    import scipy

    h = hashlib.sha256(f"{sys.version}|{np.__version__}|{scipy.__version__}".encode())
    pkg = Path(__file__).parent
    for rel in MODEL_SOURCES:
        target = pkg / rel
        for f in sorted(target.rglob("*.py")) if target.is_dir() else [target]:
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


class DiskStore:
    """Built variants and variant counts of the tables in ``files``, stored in ``root``
    under a content key, the folder kept under ``max_bytes`` (default :func:`cache_max_bytes`)
    by removing the least recently used files (module docstring). Best effort: an unreadable,
    foreign or corrupt file is a miss, a failed write is ignored (the variant is simply built
    again)."""

    def __init__(
        self,
        root: Path,
        files: dict[tuple[str, str, str], Path],
        devices: dict[str, Device],
        max_bytes: int | None = None,
    ) -> None:
        self.root, self.files, self.devices = root, files, devices
        self.max_bytes = cache_max_bytes() if max_bytes is None else max_bytes
        self._table_digest: dict[Path, str] = {}

    def path(self, key: tuple) -> Path | None:
        """The file of ``key`` (``(kind, gpu, engine, op, ...)``), ``None`` for an unknown table."""
        gpu, engine, op = key[1:4]
        table = self.files.get((gpu, engine, op))
        if table is None:
            return None
        if table not in self._table_digest:
            self._table_digest[table] = hashlib.sha256(table.read_bytes()).hexdigest()
        text = f"{self.devices.get(gpu)!r}|{self._table_digest[table]}|{_code_digest()}"
        content = hashlib.sha256(text.encode()).hexdigest()[:24]
        return self.root / f"{self._stem(key)}-{content}{SUFFIX}"

    def _stem(self, key: tuple) -> str:
        """The part of a file name that names the variant and its table's engine version (not
        the content it was built from): two versions of a table keep two files, neither
        replacing the other."""
        gpu, engine, op = key[1:4]
        table = self.files.get((gpu, engine, op))
        version = "" if table is None else table.parent.name
        digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        return f"{gpu}-{engine}-{op}@{version}-{key[0]}-{digest}"

    def get(self, key: tuple) -> Any | None:
        path = self.path(key)
        if path is None:
            return None
        try:
            blob = _read_trusted(self.root, path.name, self.max_bytes)
            if blob is None:
                return None
            value = _unpack(blob)
        except Exception:  # a truncated, foreign or malformed file is a miss (rebuilt)
            return None
        with contextlib.suppress(OSError):  # a hit is a use: the size cap removes it last
            os.utime(path)
        return value

    def put(self, key: tuple, value: Any) -> None:
        path = self.path(key)
        if path is None:
            return
        try:
            blob = _pack(value)
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            dfd = _open_trusted_dir(self.root)
            if dfd is None:
                return
            os.close(dfd)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:  # mkstemp: mode 0600
                    f.write(blob)
                os.replace(tmp, path)
                for old in self.root.glob(f"{self._stem(key)}-*{SUFFIX}"):
                    if old != path:  # built from an older table or model: one file per variant
                        old.unlink(missing_ok=True)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except (OSError, CodecError, ValueError):
            return  # not kept: built again next time
        self.trim()

    def trim(self) -> None:
        """Remove the least recently used files (oldest modification time first, ties by
        name) until the folder's ``*.pkl`` files hold at most ``max_bytes``."""
        files = []
        try:
            with os.scandir(self.root) as entries:
                for entry in entries:
                    st = _stat_stored(entry)
                    if st is not None:
                        files.append((st.st_mtime_ns, entry.name, st.st_size))
        except OSError:
            return
        total = sum(size for _, _, size in files)
        for _, name, size in sorted(files):
            if total <= self.max_bytes:
                break
            try:
                (self.root / name).unlink(missing_ok=True)  # another process may have
            except OSError:  # removed it already, or may hold the folder read-only
                continue
            total -= size


def _stat_stored(entry: os.DirEntry[str]) -> os.stat_result | None:
    """The stat of a stored variant (a plain ``*.npz`` or older ``*.pkl`` file, not a hidden
    temp file being written); ``None`` for anything else or for a file that vanished."""
    if entry.name.startswith(".") or not entry.name.endswith((SUFFIX, ".pkl")):
        return None
    try:
        return entry.stat(follow_symlinks=False) if entry.is_file(follow_symlinks=False) else None
    except OSError:
        return None


def _pack(value: Any) -> bytes:
    """``value`` as the bytes of an uncompressed ``.npz`` (:mod:`moeplan.kernel_codec`)."""
    graph, arrays = encode(value)
    buf = io.BytesIO()
    members = {"graph": np.frombuffer(graph, np.uint8)}
    members.update({f"a{i}": a for i, a in enumerate(arrays)})
    np.savez(buf, allow_pickle=False, **members)
    return buf.getvalue()


def _unpack(blob: bytes) -> Any:
    """The value in ``blob``: stored (uncompressed) members only, each no larger than the
    file, read without pickle; :class:`CodecError` or ``ValueError`` for anything else."""
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        infos = {i.filename: i for i in z.infolist()}
        if GRAPH not in infos:
            raise CodecError("no graph member")
        for info in infos.values():
            if info.compress_type != zipfile.ZIP_STORED or info.file_size > len(blob):
                raise CodecError(f"member {info.filename!r} is compressed or too large")
        arrays, i = [], 0
        while f"a{i}.npy" in infos:
            with z.open(f"a{i}.npy") as f:
                arrays.append(np.lib.format.read_array(f, allow_pickle=False))
            i += 1
        with z.open(GRAPH) as f:
            graph = np.lib.format.read_array(f, allow_pickle=False)
    if graph.dtype != np.uint8 or graph.ndim != 1:
        raise CodecError("graph member must be bytes")
    return decode(graph.tobytes(), arrays)


def _owned_private(st: os.stat_result) -> bool:
    """Owned by this user and writable by no one else."""
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _open_trusted_dir(root: Path) -> int | None:
    """A descriptor of the store's folder when it is a folder owned by this user and writable
    by no one else (checked on the descriptor), else ``None``."""
    try:
        dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    st = os.fstat(dfd)
    if stat.S_ISDIR(st.st_mode) and _owned_private(st):
        return dfd
    os.close(dfd)
    return None


def _read_trusted(root: Path, name: str, limit: int) -> bytes | None:
    """The bytes of ``root/name`` when the folder and the file pass the checks (module
    docstring), else ``None``; opened relative to the checked folder, never following a
    symlink, never blocking on a FIFO."""
    dfd = _open_trusted_dir(root)
    if dfd is None:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except OSError:
        return None
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and _owned_private(st)) or st.st_size > limit:
            return None
        return f.read(st.st_size + 1)[: st.st_size]
