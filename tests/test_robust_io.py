"""Writers never replace what is not a regular file, name the user's path on a failed write,
and an ``--out`` set interrupted by ``kill -9`` is restored or cleaned by the next run."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from moeplan import io as mio
from moeplan.errors import MoeplanError
from moeplan.io import OutputSet, write_atomic

KNOWN = {"plan.json", "report.html"}


@pytest.mark.parametrize("kind", ["FIFO", "folder", "link-to-fifo", "link-to-dev-null"])
def test_single_file_writer_refuses_a_target_that_is_not_a_regular_file(tmp_path, kind):
    targets = {
        "FIFO": tmp_path / "fifo",
        "folder": tmp_path / "folder",
        "link-to-fifo": tmp_path / "lf",
        "link-to-dev-null": tmp_path / "ld",
    }
    os.mkfifo(targets["FIFO"])
    targets["folder"].mkdir()
    targets["link-to-fifo"].symlink_to(targets["FIFO"])
    targets["link-to-dev-null"].symlink_to("/dev/null")
    before = {k: os.lstat(p).st_mode for k, p in targets.items()}
    with pytest.raises(MoeplanError, match=f"output path \\({targets[kind]}\\) exists and is not"):
        write_atomic(targets[kind], "{}")
    assert {k: os.lstat(p).st_mode for k, p in targets.items()} == before
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in targets.values())


def test_a_folder_that_is_a_file_is_named(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(MoeplanError, match="output path .*f/out.json.* not a folder"):
        write_atomic(tmp_path / "f" / "out.json", "{}")
    with pytest.raises(MoeplanError, match="--out .*its folder .* is not a folder"):
        OutputSet(tmp_path / "f" / "D", known=KNOWN)


def test_full_disk_and_read_only_name_the_users_path(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    with pytest.raises(OSError) as ex, mio.atomic_path(target) as tmp:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert ex.value.filename == str(target) and ex.value.errno == errno.ENOSPC

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / ".out.json.x1.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(OSError) as ex:
        write_atomic(target, "{}")
    assert ex.value.filename == str(target)
    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    with pytest.raises(OSError) as ex, OutputSet(tmp_path / "D", known=KNOWN):
        pass
    assert ex.value.filename == str(tmp_path / "D")
    assert list(tmp_path.iterdir()) == []


def test_cli_refuses_a_fifo_as_trace_out_before_the_work(tmp_path, capsys):
    from moeplan.cli import main

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit) as ex:
        main(
            [
                "serve-sim",
                "--model",
                "mixtral-8x7b",
                "--cluster",
                "h100-sxm-8",
                "--requests",
                "5",
                "--trace-out",
                str(fifo),
            ]
        )
    assert ex.value.code == 2 and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert f"output path ({fifo}) exists and is not a regular file" in capsys.readouterr().err


def publish(out: Path, text: str) -> None:
    with OutputSet(out, known=KNOWN) as s:
        s.write("plan.json", text)


def hidden(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))


def test_a_set_left_hidden_between_the_renames_is_restored(tmp_path):
    out = tmp_path / "D"
    old, stage = tmp_path / ".D.abcdefgh.old", tmp_path / ".D.ijklmnop.tmp"
    old.mkdir()
    (old / "plan.json").write_text("previous")
    (old / "report.html").write_text("previous")
    stage.mkdir()
    (stage / "plan.json").write_text("half")
    OutputSet(out, known=KNOWN)  # the next run, before any work
    assert (out / "plan.json").read_text() == "previous" and hidden(tmp_path) == []
    publish(out, "new")
    assert (out / "plan.json").read_text() == "new" and hidden(tmp_path) == []


def test_leftovers_beside_a_published_set_are_removed_and_live_ones_kept(tmp_path):
    out = tmp_path / "D"
    publish(out, "current")
    for name in (".D.abcdefgh.old", ".D.ijklmnop.tmp", ".D.live0000.tmp"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "plan.json").write_text("x" * 1000)
    (tmp_path / ".D.notours.tmp").mkdir()  # not a name OutputSet makes: left alone
    fd = os.open(tmp_path / ".D.live0000.tmp", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another live run's stage
    try:
        OutputSet(out, known=KNOWN)
        assert hidden(tmp_path) == [".D.live0000.tmp", ".D.notours.tmp"]
    finally:
        os.close(fd)
    assert (out / "plan.json").read_text() == "current"


def test_another_run_publishing_between_our_renames_is_not_an_error(tmp_path, monkeypatch):
    out = tmp_path / "D"
    publish(out, "first")
    real = os.rename
    calls = []

    def racing(src, dst):
        if Path(dst) == out and ".tmp" in str(src) and not calls:
            calls.append(src)
            publish(out, "other run")  # published while we were between our two renames
        return real(src, dst)

    monkeypatch.setattr(os, "rename", racing)
    publish(out, "ours")
    assert calls and (out / "plan.json").read_text() == "ours" and hidden(tmp_path) == []


KILLER = """
import os, signal, sys
from pathlib import Path
from moeplan.io import OutputSet
out = Path(sys.argv[1])
real = os.rename
def rename(src, dst):
    if Path(dst) == out:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst)
os.rename = rename
with OutputSet(out, known={"plan.json", "report.html"}) as s:
    s.write("plan.json", "new")
"""


def test_kill_9_between_the_two_renames(tmp_path):
    out = tmp_path / "D"
    publish(out, "previous")
    p = subprocess.run([sys.executable, "-c", KILLER, str(out)], env={**os.environ})
    assert p.returncode == -signal.SIGKILL
    assert not out.exists() and len(hidden(tmp_path)) == 2  # the .old set and the stage
    OutputSet(out, known=KNOWN)
    assert (out / "plan.json").read_text() == "previous" and hidden(tmp_path) == []
